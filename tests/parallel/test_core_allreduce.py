"""Allreduce through the NumPy-level ``hora`` API, checked against NumPy on every rank."""

from __future__ import annotations

import warnings

import hora
import numpy as np
import pytest
from conftest import (
    DTYPES,
    FLOAT_DTYPES,
    OPS,
    SIZES,
    adasum_ref,
    all_inputs,
    assert_close,
    assert_same,
    check_next_op_works,
    is_power_of_two,
    kind_for_op,
    np_dtype,
    rank,
    reduce_ref,
    resolve_count,
    size,
    truncating_division,
)

SCALE_DTYPES = ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
# Factors that are powers of two keep integer results independent of how the engine folds the
# 1/size of Average into the postscale.
EXACT_SCALES = [(0.5, 1.0), (1.0, 2.0), (2.0, 0.25)]


def _run_allreduce(dtype: str, count: int, op: str, tag: str, **kwargs: float) -> None:
    xs = all_inputs(count, dtype, tag, op, kind=kind_for_op(op))
    mine = xs[rank()].copy()
    out = hora.allreduce(xs[rank()], op=OPS[op], name=f"{tag}.{op}.{dtype}.{count}", **kwargs)
    expected = reduce_ref(
        xs, op, dtype, kwargs.get("prescale_factor", 1.0), kwargs.get("postscale_factor", 1.0)
    )
    if op == "average" or kwargs:
        assert_close(out, expected, dtype)
    else:
        assert_same(out, expected, dtype)
    assert_same(xs[rank()], mine, dtype)  # the input is left alone
    assert out.size == 0 or not np.shares_memory(out, xs[rank()])


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_sum(dtype: str, count: int | str) -> None:
    """Sum for every dtype and every size (exact)."""
    _run_allreduce(dtype, resolve_count(count, dtype), "sum", "ar")


@pytest.mark.parametrize("count", [1, 1001, "big"])
@pytest.mark.parametrize("op", ["average", "min", "max", "product"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_ops(dtype: str, op: str, count: int | str) -> None:
    """Average (integers truncate), Min, Max and Product for every dtype."""
    _run_allreduce(dtype, resolve_count(count, dtype), op, "arop")


@pytest.mark.parametrize("count", [0, 17])
@pytest.mark.parametrize("op", ["average", "min", "max", "product"])
def test_allreduce_ops_small(op: str, count: int) -> None:
    """The other ops also work on empty and odd-sized tensors."""
    for dtype in ("int32", "float32"):
        _run_allreduce(dtype, count, op, "arsmall")


@pytest.mark.parametrize("scales", EXACT_SCALES, ids=lambda s: f"pre{s[0]}-post{s[1]}")
@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("dtype", SCALE_DTYPES)
def test_allreduce_prescale_postscale(dtype: str, op: str, scales: tuple[float, float]) -> None:
    """Prescale applies before the reduction and postscale after (integers truncate each time)."""
    pre, post = scales
    _run_allreduce(dtype, 1001, op, "arscale", prescale_factor=pre, postscale_factor=post)


@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_allreduce_inexact_scales(dtype: str, op: str) -> None:
    """Scale factors that are not powers of two, on floats."""
    _run_allreduce(dtype, 257, op, "arscale3", prescale_factor=1 / 3, postscale_factor=1.7)


@pytest.mark.parametrize("count", [1001, "big"])
@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_allreduce_random_floats(dtype: str, op: str, count: int | str) -> None:
    """Normal-distributed floats, where the order of summation matters: a tolerance applies."""
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "arrand", op, kind="normal")
    out = hora.allreduce(xs[rank()], op=OPS[op], name=f"arrand.{op}.{dtype}.{n}")
    rtol = 1e-5 if dtype == "float32" else 1e-12
    assert_close(out, reduce_ref(xs, op, dtype), dtype, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shape", [(), (3, 5), (2, 3, 4), (4, 0, 3), (1, 1, 1, 7)], ids=str)
@pytest.mark.parametrize("dtype", ["int32", "float64", "bfloat16"])
def test_allreduce_shapes(dtype: str, shape: tuple[int, ...]) -> None:
    """Multi-dimensional and 0-d tensors keep their shape."""
    xs = all_inputs(shape, dtype, "arshape")
    out = hora.allreduce(xs[rank()], op=hora.Sum, name=f"arshape.{dtype}.{shape}")
    assert_same(out, reduce_ref(xs, "sum", dtype), dtype)


@pytest.mark.parametrize("dtype", ["int16", "float16", "float32", "bool"])
def test_allreduce_inplace(dtype: str) -> None:
    """allreduce_ writes the result into the given array."""
    xs = all_inputs((7, 11), dtype, "arinplace")
    buf = xs[rank()].copy()
    ret = hora.allreduce_(buf, op=hora.Sum, name=f"arinplace.{dtype}")
    expected = reduce_ref(xs, "sum", dtype)
    assert_same(buf, expected, dtype)
    assert_same(np.asarray(ret), expected, dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int64", "bfloat16", "float32"])
def test_allreduce_async(dtype: str) -> None:
    """allreduce_async / allreduce_async_ with poll and synchronize."""
    xs = all_inputs(513, dtype, "arasync")
    ys = all_inputs(513, dtype, "arasync_")
    buf = ys[rank()].copy()
    h1 = hora.allreduce_async(xs[rank()], op=hora.Sum, name=f"arasync.{dtype}")
    h2 = hora.allreduce_async_(buf, op=hora.Max, name=f"arasync_.{dtype}")
    out = hora.synchronize(h1)
    hora.synchronize(h2)
    assert hora.poll(h1) and hora.poll(h2)
    assert_same(out, reduce_ref(xs, "sum", dtype), dtype)
    assert_same(buf, reduce_ref(ys, "max", dtype), dtype)


def test_allreduce_default_op_is_average() -> None:
    """Without op (and without average=) the op is Average, as in Horovod."""
    xs = all_inputs(64, "float32", "ardefault")
    out = hora.allreduce(xs[rank()], name="ardefault")
    assert_close(out, reduce_ref(xs, "average", "float32"), "float32")


def test_allreduce_average_argument_is_deprecated() -> None:
    """average=True still averages and warns; average=False sums."""
    xs = all_inputs(64, "float64", "ardeprecated")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        avg = hora.allreduce(xs[rank()], average=True, name="ardeprecated.avg")
        total = hora.allreduce(xs[rank()], average=False, name="ardeprecated.sum")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert_close(avg, reduce_ref(xs, "average", "float64"), "float64")
    assert_same(total, reduce_ref(xs, "sum", "float64"), "float64")


def test_allreduce_average_with_op_is_an_error() -> None:
    """Passing both average= and op= raises ValueError before anything is sent."""
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError):
        hora.allreduce(x, average=True, op=hora.Sum, name="arconflict")
    check_next_op_works("arconflict")


@pytest.mark.parametrize("count", [0, 1, 17, 1001, "big"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_allreduce_adasum(dtype: str, count: int | str) -> None:
    """Adasum on a power-of-two rank count matches the pairwise formula; otherwise an error."""
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "adasum", kind="normal")
    name = f"adasum.{dtype}.{n}"
    if not is_power_of_two(size()):
        with pytest.raises((ValueError, hora.HoraError)):
            hora.allreduce(xs[rank()], op=hora.Adasum, name=name)
        check_next_op_works(f"adasum.{dtype}.{n}")
        return
    out = hora.allreduce(xs[rank()], op=hora.Adasum, name=name)
    expected = adasum_ref(xs).astype(xs[0].dtype)
    tol = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}[dtype]
    assert_close(out, expected, dtype, rtol=tol, atol=tol)


def test_grouped_adasum_is_per_tensor() -> None:
    """Adasum in a group (fused) still computes dot products and norms per tensor."""
    if not is_power_of_two(size()):
        pytest.skip("Adasum needs a power-of-two rank count (same decision on every rank)")
    a = all_inputs(100, "float32", "gadasum.a", kind="normal")
    b = all_inputs(37, "float32", "gadasum.b", kind="normal")
    b = [x * 100.0 for x in b]  # very different norms expose a shared dot product
    outs = hora.grouped_allreduce([a[rank()], b[rank()]], op=hora.Adasum, name="gadasum")
    assert_close(outs[0], adasum_ref(a).astype(np.float32), "float32", rtol=1e-5, atol=1e-5)
    assert_close(outs[1], adasum_ref(b).astype(np.float32), "float32", rtol=1e-5, atol=1e-3)


def test_allreduce_repeated_same_name() -> None:
    """The same name reused many times (response-cache path) keeps giving correct results."""
    for step in range(20):
        xs = all_inputs(300, "float32", "arrepeat", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="arrepeat")
        assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")


def test_allreduce_unnamed_calls() -> None:
    """Unnamed calls get automatic names that agree across ranks when issued in the same order."""
    for step in range(5):
        xs = all_inputs(10 + step, "int32", "arnoname", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum)
        assert_same(out, reduce_ref(xs, "sum", "int32"), "int32")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "int32", "int64"])
def test_integer_sums_and_products_wrap(dtype: str) -> None:
    """Integer Sum and Product overflow wrap around as in NumPy on every transport (MPI leaves
    overflow undefined; Open MPI saturates 8- and 16-bit sums), for sizes on every algorithm."""
    info = np.iinfo(dtype)
    for count in (1, 1001, 70000):
        base = np.arange(count, dtype=np.int64) % 7
        x = (info.max - base - rank()).astype(dtype)
        got = hora.allreduce(x, op=hora.Sum, name=f"wrap.sum.{dtype}.{count}")
        inputs = [(info.max - base - r).astype(dtype) for r in range(size())]
        expected = np.sum(np.stack(inputs), axis=0, dtype=dtype)
        np.testing.assert_array_equal(got, expected)
        y = np.full(count, 3 + rank(), dtype=dtype) * (info.max // 8)
        got = hora.allreduce(y, op=hora.Product, name=f"wrap.prod.{dtype}.{count}")
        factors = [np.full(count, 3 + r, dtype=dtype) * (info.max // 8) for r in range(size())]
        expected = np.prod(np.stack(factors), axis=0, dtype=dtype)
        np.testing.assert_array_equal(got, expected)


def _near_limits(dtype: str, count: int, r: int) -> np.ndarray:
    """Values whose sum over 2+ ranks leaves the type: near the top, and for signed types
    alternately near the bottom (odd offsets so the averages are not whole numbers)."""
    info = np.iinfo(dtype)
    base = np.arange(count, dtype=np.int64) % 5
    high = info.max - base - r
    if info.min == 0:
        return high.astype(dtype)
    low = info.min + base + 2 * r + 1
    return np.where(np.arange(count) % 2 == 0, high, low).astype(dtype)


def _average_without_wrapping(inputs: list[np.ndarray], dtype: str) -> np.ndarray:
    """The mean of ``inputs`` summed in int64, divided exactly, truncated toward zero."""
    total = np.sum(np.stack(inputs).astype(np.int64), axis=0)
    return truncating_division(total, len(inputs)).astype(dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_narrow_integer_average_does_not_wrap(dtype: str) -> None:
    """8- and 16-bit Average is summed in a wider type, then divided and truncated toward zero
    (negative means round up), alone and fused, for sizes on every algorithm."""
    for count in (1, 1001, 70000):
        inputs = [_near_limits(dtype, count, r) for r in range(size())]
        expected = _average_without_wrapping(inputs, dtype)
        got = hora.allreduce(inputs[rank()], op=hora.Average, name=f"narrowavg.{dtype}.{count}")
        np.testing.assert_array_equal(got, expected)
        twice = hora.grouped_allreduce([inputs[rank()], inputs[rank()][::-1].copy()],
                                       op=hora.Average, name=f"narrowavg.g.{dtype}.{count}")
        np.testing.assert_array_equal(twice[0], expected)
        np.testing.assert_array_equal(twice[1], expected[::-1])
    if dtype == "int8" and size() > 1:
        # Horovod truncates toward zero: the mean of -128 and -127 (and -127 at 3+ ranks) is
        # -127, where floor division would give -128. (One rank averages only its own -128.)
        x = np.array([-128 if rank() == 0 else -127], dtype=np.int8)
        got = hora.allreduce(x, op=hora.Average, name="narrowavg.negative")
        assert got.tolist() == [-127]


def _horovod_scaled(x: np.ndarray, factor: float, dtype: str) -> np.ndarray:
    """x * factor as Horovod computes it on the CPU: floats in their own type, float16 (and
    bfloat16) in float32, integers in float64 truncated back."""
    dt = np.dtype(x.dtype)
    if np.issubdtype(dt, np.integer):
        return (x.astype(np.float64) * factor).astype(dt)
    if dtype in ("float16", "bfloat16"):
        return (x.astype(np.float32) * np.float32(factor)).astype(dt)
    return x * dt.type(factor)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "int32", "int64",
                                   "float16", "bfloat16", "float32", "float64"])
def test_scale_factors_bit_identical(dtype: str) -> None:
    """Sum with a prescale or postscale factor equals Horovod's arithmetic bit for bit: every
    rank holds the same x, so the result is (n * x) * f, or n * (x * f) with a prescale."""
    n = size()
    rng = np.random.default_rng(1234)
    # Small whole numbers, so n * x stays exact and inside every type at up to four ranks.
    x_wide = rng.integers(0 if dtype.startswith("u") else -30, 30, size=(17, 17))
    x = x_wide.astype(np.float32).astype(np_dtype(dtype))
    summed = (x.astype(np.float64) * n).astype(x.dtype)  # exact: small whole numbers
    # 0.3 is a factor whose float32 product differs from the float64 product rounded to float32.
    for i, factor in enumerate((float(rng.uniform()), 0.3)):
        pre = hora.allreduce(x, op=hora.Sum, prescale_factor=factor,
                             name=f"bitscale.pre.{dtype}.{i}")
        post = hora.allreduce(x, op=hora.Sum, postscale_factor=factor,
                              name=f"bitscale.post.{dtype}.{i}")
        want_post = _horovod_scaled(summed, factor, dtype)
        want_pre = (_horovod_scaled(x, factor, dtype).astype(np.float64) * n).astype(x.dtype)
        if n <= 3:
            # Up to three equal addends the sum rounds at most once, like the multiplication.
            np.testing.assert_array_equal(post, want_post)
            np.testing.assert_array_equal(pre, want_pre)
        else:
            assert_close(post, want_post, dtype)
            assert_close(pre, want_pre, dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "bfloat16", "float32", "float64"])
def test_average_divides_by_size(dtype: str) -> None:
    """A plain Average is the sum divided by the size: exactly for integers (truncating toward
    zero, so a multiple of the size gives the exact quotient), correctly rounded for floats (in
    float32 for float16 and bfloat16), which multiplying by 1/size in the type is not."""
    n = size()
    # Whole numbers whose sums over up to four ranks are exact in every type.
    bound = 25 if dtype in ("float16", "bfloat16") else 600
    base = np.arange(-bound, bound + 1, dtype=np.int64)
    # Rank 0 adds one so the sum is not a multiple of the size.
    inputs = [(base * (r + 1) + (r == 0)).astype(np.float64).astype(np_dtype(dtype))
              for r in range(n)]
    x = inputs[rank()]
    total = sum(v.astype(np.float64) for v in inputs)
    got = hora.allreduce(x, op=hora.Average, name=f"avgdiv.{dtype}")
    if dtype in ("int32", "int64"):
        expected = truncating_division(total.astype(np.int64), n).astype(dtype)
    elif dtype in ("float16", "bfloat16"):
        expected = (total.astype(np_dtype(dtype)).astype(np.float32) / np.float32(n)).astype(
            np_dtype(dtype))
    else:
        expected = total.astype(dtype) / np.dtype(dtype).type(n)
    np.testing.assert_array_equal(got, expected)
