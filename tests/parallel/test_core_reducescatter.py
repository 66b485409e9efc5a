"""Reducescatter (Sum and Average) through the NumPy-level ``hora`` API."""

from __future__ import annotations

import hora
import numpy as np
import pytest
from conftest import (
    DTYPES,
    OPS,
    SIZES,
    all_inputs,
    assert_close,
    assert_same,
    big_count,
    rank,
    reduce_ref,
    reducescatter_rows,
    resolve_count,
    size,
    truncating_division,
)


def _my_part(full: np.ndarray) -> np.ndarray:
    """Rows of the full reduction that belong to this rank."""
    rows = reducescatter_rows(full.shape[0], size())
    start = sum(rows[: rank()])
    return full[start : start + rows[rank()]]


def _run(
    dtype: str, shape: tuple[int, ...], op: str, tag: str, pre: float = 1.0, post: float = 1.0
) -> None:
    xs = all_inputs(shape, dtype, tag, op)
    mine = xs[rank()].copy()
    kwargs = {}
    if pre != 1.0 or post != 1.0:
        kwargs = {"prescale_factor": pre, "postscale_factor": post}
    out = hora.reducescatter(xs[rank()], op=OPS[op], name=f"{tag}.{op}.{dtype}.{shape}", **kwargs)
    expected = _my_part(reduce_ref(xs, op, dtype, pre, post))
    if op == "sum" and not kwargs:
        assert_same(out, expected, dtype)
    else:
        assert_close(out, expected, dtype)
    assert_same(xs[rank()], mine, dtype)


@pytest.mark.parametrize("dim0", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reducescatter_sum(dtype: str, dim0: int | str) -> None:
    """Sum for every dtype; dim0 empty, 1 (fewer rows than ranks), odd, big."""
    _run(dtype, (resolve_count(dim0, dtype),), "sum", "rs")


@pytest.mark.parametrize("dim0", [5, 1001, "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reducescatter_average(dtype: str, dim0: int | str) -> None:
    """Average divides by the rank count (integers truncate toward zero)."""
    _run(dtype, (resolve_count(dim0, dtype),), "average", "rsavg")


@pytest.mark.parametrize("trailing", [(3,), (2, 4), (1, 1, 5)], ids=str)
@pytest.mark.parametrize("dtype", ["int32", "float32", "bfloat16"])
def test_reducescatter_shapes(dtype: str, trailing: tuple[int, ...]) -> None:
    """Rows are split along dim0; trailing dimensions are kept."""
    for dim0 in (1, size(), 2 * size() + 1):
        _run(dtype, (dim0, *trailing), "sum", "rsshape")


def test_reducescatter_big_rows() -> None:
    """Rows larger than the fusion threshold on a small threshold."""
    rows = 2 * size() + 1
    cols = big_count("float32") // 2 + 1
    _run("float32", (rows, cols), "sum", "rsbigrows")


@pytest.mark.parametrize("scales", [(0.5, 1.0), (1.0, 2.0), (2.0, 0.25)], ids=str)
@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("dtype", ["int8", "int64", "float16", "float32"])
def test_reducescatter_prescale_postscale(dtype: str, op: str, scales: tuple[float, float]) -> None:
    """Prescale before, postscale after the reduction."""
    _run(dtype, (4 * size() + 3, 2), op, "rsscale", *scales)


@pytest.mark.parametrize("dtype", ["uint16", "float64"])
def test_reducescatter_async(dtype: str) -> None:
    """reducescatter_async + synchronize, two in flight, synchronized in reverse."""
    xs = all_inputs((3 * size() + 2,), dtype, "rsasync", "sum")
    ys = all_inputs((size() + 1, 3), dtype, "rsasync2", "sum")
    h1 = hora.reducescatter_async(xs[rank()], op=hora.Sum, name=f"rsasync.{dtype}")
    h2 = hora.reducescatter_async(ys[rank()], op=hora.Sum, name=f"rsasync2.{dtype}")
    out2 = hora.synchronize(h2)
    out1 = hora.synchronize(h1)
    assert_same(out1, _my_part(reduce_ref(xs, "sum", dtype)), dtype)
    assert_same(out2, _my_part(reduce_ref(ys, "sum", dtype)), dtype)


def test_grouped_reducescatter() -> None:
    """grouped_reducescatter over tensors of different dtypes and shapes."""
    specs = [("float32", (2 * size() + 1,)), ("int32", (size(), 3)), ("float16", (1, 2))]
    inputs = [all_inputs(shape, dt, f"grs{i}", "sum") for i, (dt, shape) in enumerate(specs)]
    outs = hora.grouped_reducescatter([xs[rank()] for xs in inputs], op=hora.Sum, name="grs")
    assert len(outs) == len(specs)
    for (dt, _), xs, out in zip(specs, inputs, outs):
        assert_same(out, _my_part(reduce_ref(xs, "sum", dt)), dt)


def test_grouped_reducescatter_async_average() -> None:
    """grouped_reducescatter_async with Average."""
    inputs = [all_inputs((2 * size() + i,), "float64", f"grsa{i}", "average") for i in range(3)]
    handle = hora.grouped_reducescatter_async(
        [xs[rank()] for xs in inputs], op=hora.Average, name="grsa"
    )
    outs = hora.synchronize(handle)
    for xs, out in zip(inputs, outs):
        assert_close(out, _my_part(reduce_ref(xs, "average", "float64")), "float64")


def test_reducescatter_default_op_is_average() -> None:
    """Without op the reduction is Average, as in Horovod."""
    xs = all_inputs((3 * size(),), "float32", "rsdefault", "average")
    out = hora.reducescatter(xs[rank()], name="rsdefault")
    assert_close(out, _my_part(reduce_ref(xs, "average", "float32")), "float32")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_reducescatter_narrow_integer_average_does_not_wrap(dtype: str) -> None:
    """8- and 16-bit Average sums in a wider type before dividing (truncating toward zero),
    also with a prescale factor (applied in the type first) and fused."""
    info = np.iinfo(dtype)
    rows = 3 * size() + 1
    offsets = np.arange(rows * 2, dtype=np.int64).reshape(rows, 2) % 5
    inputs = []
    for r in range(size()):
        high = info.max - offsets - r
        low = info.min + offsets + 2 * r + 1 if info.min < 0 else high
        inputs.append(np.where(offsets % 2 == 0, high, low).astype(dtype))
    total = np.sum(np.stack(inputs).astype(np.int64), axis=0)
    expected = _my_part(truncating_division(total, size()).astype(dtype))
    got = hora.reducescatter(inputs[rank()], op=hora.Average, name=f"rsnarrow.{dtype}")
    np.testing.assert_array_equal(got, expected)
    halves = [np.trunc(x.astype(np.float64) * 0.5).astype(dtype) for x in inputs]
    total = np.sum(np.stack(halves).astype(np.int64), axis=0)
    expected_half = _my_part(truncating_division(total, size()).astype(dtype))
    got = hora.grouped_reducescatter([inputs[rank()], inputs[rank()]], op=hora.Average,
                                     prescale_factor=0.5, name=f"rsnarrow.g.{dtype}")
    np.testing.assert_array_equal(got[0], expected_half)
    np.testing.assert_array_equal(got[1], expected_half)
