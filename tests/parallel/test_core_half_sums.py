"""float16 and bfloat16 Sum and Average round once, whatever the number of ranks.

The engine sums them in float32 and rounds into the type at the end (after the division of a plain
Average), so an Average of equal values returns them exactly and a sum equals the exact sum rounded
once. A postscale factor then scales the rounded sum in float32, as Horovod scales a reduced
float16 buffer, so sum(x) * f equals (n * x) * f as Horovod's own tests expect at three ranks. Inputs are
chosen so that every float32 sum here is exact (values of at most 11 significant bits below 128).
"""

from __future__ import annotations

import hora
import numpy as np
import pytest
from conftest import np_dtype, rank, size

HALF_DTYPES = ["float16", "bfloat16"]


def _values(dtype: str, seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Values in [1, 100) with every bit of the type's mantissa in use."""
    rng = np.random.default_rng(seed)
    return rng.uniform(1.0, 100.0, size=shape).astype(np.float32).astype(np_dtype(dtype))


def _rows(dim0: int, n: int, k: int) -> slice:
    """Rows of a dim0-row tensor that rank k of n receives (the first dim0 % n get one more)."""
    base, extra = divmod(dim0, n)
    start = k * base + min(k, extra)
    return slice(start, start + base + (1 if k < extra else 0))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_average_of_equal_values_is_exact(dtype: str) -> None:
    """Every rank holds the same x: Average returns x bit for bit (allreduce, reducescatter and
    grouped reducescatter), where summing in the type rounds 3x at three ranks."""
    n = size()
    x = _values(dtype, 7, (4 * n, 5))
    got = hora.allreduce(x, op=hora.Average, name=f"halfavg.ar.{dtype}")
    np.testing.assert_array_equal(got, x)
    got = hora.reducescatter(x, op=hora.Average, name=f"halfavg.rs.{dtype}")
    np.testing.assert_array_equal(got, x[_rows(4 * n, n, rank())])
    ys = [_values(dtype, 8 + i, (n * 4 + i, 3)) for i in range(3)]
    outs = hora.grouped_reducescatter(ys, op=hora.Average, name=f"halfavg.grs.{dtype}")
    for y, out in zip(ys, outs):
        np.testing.assert_array_equal(out, y[_rows(y.shape[0], n, rank())])


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_sum_rounds_once(dtype: str) -> None:
    """Different values on every rank: the sum is the exact sum rounded once into the type, and a
    postscale factor multiplies that rounded sum in float32 (then rounds again)."""
    n = size()
    xs = [_values(dtype, 100 + r, (6 * n + 1,)) for r in range(n)]
    exact = sum(v.astype(np.float64) for v in xs)
    got = hora.allreduce(xs[rank()], op=hora.Sum, name=f"halfsum.ar.{dtype}")
    np.testing.assert_array_equal(got, exact.astype(np_dtype(dtype)))
    factor = 0.3
    got = hora.allreduce(xs[rank()], op=hora.Sum, postscale_factor=factor,
                         name=f"halfsum.post.{dtype}")
    rounded = exact.astype(np_dtype(dtype)).astype(np.float32)
    want = (rounded * np.float32(factor)).astype(np_dtype(dtype))
    np.testing.assert_array_equal(got, want)
    got = hora.reducescatter(xs[rank()], op=hora.Sum, postscale_factor=factor,
                             name=f"halfsum.rspost.{dtype}")
    np.testing.assert_array_equal(got, want[_rows(6 * n + 1, n, rank())])
    got = hora.reducescatter(xs[rank()], op=hora.Sum, name=f"halfsum.rs.{dtype}")
    np.testing.assert_array_equal(got, exact.astype(np_dtype(dtype))[_rows(6 * n + 1, n, rank())])


def test_half_average_with_factors_and_min_max() -> None:
    """Average with a postscale factor scales the rounded sum by postscale / size in float32; Min
    and Max stay exact."""
    n = size()
    xs = [_values("float16", 200 + r, (9,)) for r in range(n)]
    rounded = sum(v.astype(np.float64) for v in xs).astype(np.float16).astype(np.float32)
    got = hora.allreduce(xs[rank()], op=hora.Average, postscale_factor=2.0, name="halfavg.post")
    want = (rounded * np.float32(2.0 / n)).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    stacked = np.stack(xs)
    got = hora.allreduce(xs[rank()], op=hora.Min, name="halfmin")
    np.testing.assert_array_equal(got, stacked.min(axis=0))
    got = hora.allreduce(xs[rank()], op=hora.Max, name="halfmax")
    np.testing.assert_array_equal(got, stacked.max(axis=0))
