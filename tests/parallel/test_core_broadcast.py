"""Broadcast from every root through the NumPy-level ``hora`` API."""

from __future__ import annotations

import hora
import numpy as np
import pytest
from conftest import DTYPES, SIZES, all_inputs, assert_same, rank, resolve_count, size


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype: str, count: int | str) -> None:
    """broadcast returns the root's tensor on every rank and leaves the input alone."""
    n = resolve_count(count, dtype)
    for root in range(size()):
        xs = all_inputs(n, dtype, "bc", root, kind="any")
        mine = xs[rank()].copy()
        out = hora.broadcast(xs[rank()], root_rank=root, name=f"bc.{dtype}.{n}.{root}")
        assert_same(out, xs[root], dtype)
        assert_same(xs[rank()], mine, dtype)


@pytest.mark.parametrize("shape", [(), (3, 4), (2, 0, 5), (2, 3, 4, 1)], ids=str)
@pytest.mark.parametrize("dtype", ["int16", "float32", "bfloat16", "bool"])
def test_broadcast_shapes(dtype: str, shape: tuple[int, ...]) -> None:
    """0-d and multi-dimensional tensors."""
    root = size() - 1
    xs = all_inputs(shape, dtype, "bcshape", kind="any")
    out = hora.broadcast(xs[rank()], root_rank=root, name=f"bcshape.{dtype}.{shape}")
    assert_same(out, xs[root], dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int64", "float16", "float64"])
def test_broadcast_inplace(dtype: str) -> None:
    """broadcast_ overwrites the given array on every rank."""
    for root in range(size()):
        xs = all_inputs((5, 9), dtype, "bcinplace", root, kind="any")
        buf = xs[rank()].copy()
        ret = hora.broadcast_(buf, root_rank=root, name=f"bcinplace.{dtype}.{root}")
        assert_same(buf, xs[root], dtype)
        assert_same(np.asarray(ret), xs[root], dtype)


@pytest.mark.parametrize("dtype", ["int32", "bfloat16"])
def test_broadcast_async(dtype: str) -> None:
    """broadcast_async / broadcast_async_ from different roots in flight together."""
    handles = []
    buffers = []
    expected = []
    for root in range(size()):
        xs = all_inputs(129, dtype, "bcasync", root, kind="any")
        ys = all_inputs(65, dtype, "bcasync_", root, kind="any")
        buf = ys[rank()].copy()
        handles.append(hora.broadcast_async(xs[rank()], root, name=f"bcasync.{dtype}.{root}"))
        handles.append(hora.broadcast_async_(buf, root, name=f"bcasync_.{dtype}.{root}"))
        buffers.append(buf)
        expected.append((xs[root], ys[root]))
    outs = [hora.synchronize(h) for h in handles]
    for root in range(size()):
        assert_same(outs[2 * root], expected[root][0], dtype)
        assert_same(buffers[root], expected[root][1], dtype)


def test_broadcast_object() -> None:
    """broadcast_object sends a picklable object from any root."""
    for root in range(size()):
        obj = {"from": rank(), "data": list(range(rank() * 3)), "t": (1.5, "x")}
        got = hora.broadcast_object(obj, root_rank=root, name=f"bcobj.{root}")
        assert got == {"from": root, "data": list(range(root * 3)), "t": (1.5, "x")}


def test_broadcast_object_default_name() -> None:
    """broadcast_object without a name (named after the type) works repeatedly."""
    for step in range(3):
        got = hora.broadcast_object([rank(), step])
        assert got == [0, step]
