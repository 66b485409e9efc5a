"""Allgather (dim0 may differ per rank) through the NumPy-level ``hora`` API."""

from __future__ import annotations

import hora
import numpy as np
import pytest
from conftest import DTYPES, assert_same, big_count, make_input, np_dtype, rank, size

TRAILING = (3,)


def _rows(pattern: str, r: int, dtype: str) -> int:
    """dim0 of rank r's input for a row pattern (the same on every rank)."""
    if pattern == "zero_on_rank0":
        return r  # rank 0 sends nothing
    if pattern == "one":
        return 1
    if pattern == "odd":
        return 2 * r + 3
    if pattern == "none":
        return 0
    if pattern == "big":  # more bytes than the fusion threshold in total and per rank
        return big_count(dtype) // 3 + r
    raise ValueError(pattern)


def _inputs(pattern: str, dtype: str, tag: str, trailing: tuple[int, ...] = TRAILING) -> list:
    return [
        make_input(r, (_rows(pattern, r, dtype), *trailing), dtype, tag, pattern, kind="any")
        for r in range(size())
    ]


@pytest.mark.parametrize("pattern", ["zero_on_rank0", "one", "odd", "none", "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather(dtype: str, pattern: str) -> None:
    """Concatenation along dim0 in rank order, for every dtype and row pattern."""
    xs = _inputs(pattern, dtype, "ag")
    mine = xs[rank()].copy()
    out = hora.allgather(xs[rank()], name=f"ag.{dtype}.{pattern}")
    assert_same(out, np.concatenate(xs), dtype)
    assert_same(xs[rank()], mine, dtype)


@pytest.mark.parametrize(
    "trailing", [(), (1,), (2, 5), (4, 1, 3)], ids=lambda t: "x".join(map(str, t)) or "1d"
)
@pytest.mark.parametrize("dtype", ["int8", "float32", "bfloat16"])
def test_allgather_shapes(dtype: str, trailing: tuple[int, ...]) -> None:
    """1-D and multi-dimensional inputs keep their trailing dimensions."""
    xs = _inputs("odd", dtype, "agshape", trailing)
    out = hora.allgather(xs[rank()], name=f"agshape.{dtype}.{len(trailing)}.{trailing}")
    assert_same(out, np.concatenate(xs), dtype)


@pytest.mark.parametrize("dtype", ["uint16", "float64", "bool"])
def test_allgather_async(dtype: str) -> None:
    """allgather_async + synchronize, several in flight at once, synchronized in reverse."""
    inputs = [_inputs("odd", dtype, f"agasync{i}") for i in range(4)]
    handles = [
        hora.allgather_async(xs[rank()], name=f"agasync.{dtype}.{i}") for i, xs in enumerate(inputs)
    ]
    for i in reversed(range(len(handles))):
        out = hora.synchronize(handles[i])
        assert_same(out, np.concatenate(inputs[i]), dtype)


def test_grouped_allgather() -> None:
    """grouped_allgather over tensors of different dtypes and shapes."""
    specs = [("float32", (2,)), ("int64", ()), ("bfloat16", (3, 2)), ("uint8", (5,))]
    inputs = [_inputs("zero_on_rank0", dt, f"gag{i}", tr) for i, (dt, tr) in enumerate(specs)]
    outs = hora.grouped_allgather([xs[rank()] for xs in inputs], name="gag")
    assert len(outs) == len(specs)
    for (dt, _), xs, out in zip(specs, inputs, outs):
        assert_same(out, np.concatenate(xs), dt)


def test_grouped_allgather_async() -> None:
    """grouped_allgather_async returns one handle whose result is the list of outputs."""
    inputs = [_inputs("one", "int32", f"gaga{i}") for i in range(3)]
    handle = hora.grouped_allgather_async([xs[rank()] for xs in inputs], name="gaga")
    outs = hora.synchronize(handle)
    for xs, out in zip(inputs, outs):
        assert_same(out, np.concatenate(xs), "int32")


def test_allgather_object() -> None:
    """allgather_object returns every rank's object in rank order."""
    objs = hora.allgather_object({"rank": rank(), "payload": list(range(rank() + 1))})
    assert objs == [{"rank": r, "payload": list(range(r + 1))} for r in range(size())]


def test_allgather_result_dtype_bfloat16() -> None:
    """A bfloat16 input gives a bfloat16 (not uint16) result."""
    x = np.full((2, 2), rank() + 0.5, dtype=np_dtype("bfloat16"))
    out = hora.allgather(x, name="agbf16dtype")
    assert out.dtype == np_dtype("bfloat16")
    expected = np.concatenate([np.full((2, 2), r + 0.5) for r in range(size())])
    assert_same(out, expected.astype(np_dtype("bfloat16")), "bfloat16")
