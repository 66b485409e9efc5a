"""Alltoall with equal and explicit splits through the NumPy-level ``hora`` API."""

from __future__ import annotations

import hora
import numpy as np
import pytest
from conftest import DTYPES, assert_same, big_count, make_input, rank, rank_rng, size

TRAILING = (2,)


def _splits(sender: int, mode: str, dtype: str) -> np.ndarray:
    """Rows that ``sender`` sends to each rank (int32), the same on every rank."""
    n = size()
    if mode == "random":
        return rank_rng(sender, "a2a-splits", dtype).integers(0, 5, size=n).astype(np.int32)
    if mode == "zeros":  # nobody sends anything to rank 0 and rank 0 sends nothing
        return np.array(
            [0 if (sender == 0 or r == 0) else sender + r for r in range(n)], dtype=np.int32
        )
    if mode == "big":
        rows = big_count(dtype) // (TRAILING[0] * n) + 1
        return np.full(n, rows, dtype=np.int32)
    raise ValueError(mode)


def _expected(xs: list[np.ndarray], splits: list[np.ndarray]) -> tuple[np.ndarray, list[int]]:
    """What this rank receives: from each sender s, the rows s addressed to this rank."""
    me = rank()
    parts = []
    received = []
    for s, (x, sp) in enumerate(zip(xs, splits)):
        start = int(np.sum(sp[:me]))
        parts.append(x[start : start + int(sp[me])])
        received.append(int(sp[me]))
    return np.concatenate(parts), received


def _unwrap(result: object) -> tuple[np.ndarray, object]:
    """(output, received_splits or None) from what synchronize returned for an alltoall."""
    if isinstance(result, tuple):
        return result[0], result[1]
    return result, None


@pytest.mark.parametrize("rows_per_rank", [0, 1, 3, "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_equal_split(dtype: str, rows_per_rank: int | str) -> None:
    """Without splits the tensor is cut into size() equal parts; the result is a plain array."""
    if rows_per_rank == "big":
        rows = big_count(dtype) // (TRAILING[0] * size()) + 1
    else:
        rows = int(rows_per_rank)
    shape = (rows * size(), *TRAILING)
    xs = [make_input(s, shape, dtype, "a2aeq", rows, kind="any") for s in range(size())]
    mine = xs[rank()].copy()
    out = hora.alltoall(xs[rank()], name=f"a2aeq.{dtype}.{rows}")
    splits = [np.full(size(), rows, dtype=np.int32) for _ in range(size())]
    expected, _ = _expected(xs, splits)
    assert_same(out, expected, dtype)
    assert_same(xs[rank()], mine, dtype)


@pytest.mark.parametrize("slack", [0, 3], ids=["exact", "unsent_rows"])
@pytest.mark.parametrize("mode", ["random", "zeros", "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_splits(dtype: str, mode: str, slack: int) -> None:
    """Explicit splits (sum may be below dim0): returns (output, received_splits)."""
    splits = [_splits(s, mode, dtype) for s in range(size())]
    xs = [
        make_input(s, (int(splits[s].sum()) + slack, *TRAILING), dtype, "a2a", mode, kind="any")
        for s in range(size())
    ]
    out, received = hora.alltoall(
        xs[rank()], splits=splits[rank()], name=f"a2a.{dtype}.{mode}.{slack}"
    )
    expected, expected_received = _expected(xs, splits)
    assert_same(out, expected, dtype)
    assert [int(v) for v in np.asarray(received).ravel()] == expected_received


@pytest.mark.parametrize("trailing", [(), (3, 2)], ids=["1d", "3d"])
def test_alltoall_shapes(trailing: tuple[int, ...]) -> None:
    """1-D and 3-D tensors with explicit splits given as a Python list."""
    splits = [_splits(s, "random", "shapes") for s in range(size())]
    xs = [
        make_input(s, (int(splits[s].sum()), *trailing), "float32", "a2ashape", kind="any")
        for s in range(size())
    ]
    out, received = hora.alltoall(
        xs[rank()], splits=[int(v) for v in splits[rank()]], name=f"a2ashape.{len(trailing)}"
    )
    expected, expected_received = _expected(xs, splits)
    assert_same(out, expected, "float32")
    assert [int(v) for v in np.asarray(received).ravel()] == expected_received


def test_alltoall_async() -> None:
    """alltoall_async + synchronize for two tensors in flight at once."""
    splits = [_splits(s, "random", "async") for s in range(size())]
    xs = [
        make_input(s, (int(splits[s].sum()), 4), "int64", "a2aasync", kind="any")
        for s in range(size())
    ]
    ys = [make_input(s, (2 * size(),), "float16", "a2aasync2", kind="any") for s in range(size())]
    h1 = hora.alltoall_async(xs[rank()], splits=splits[rank()], name="a2aasync.1")
    h2 = hora.alltoall_async(ys[rank()], name="a2aasync.2")
    # Like Horovod's torch frontend, synchronize may give (output, received_splits) for alltoall.
    out2, _ = _unwrap(hora.synchronize(h2))
    out1, received = _unwrap(hora.synchronize(h1))
    expected1, expected_received = _expected(xs, splits)
    assert_same(out1, expected1, "int64")
    if received is not None:
        assert [int(v) for v in np.asarray(received).ravel()] == expected_received
    expected2, _ = _expected(ys, [np.full(size(), 2, dtype=np.int32)] * size())
    assert_same(out2, expected2, "float16")


def test_alltoall_uneven_without_splits_fails_on_every_rank() -> None:
    """A first dimension the ranks cannot share evenly, without splits, fails at the call with
    InvalidCollectiveError: both the ValueError Horovod's torch raises and the RuntimeError
    (HorovodInternalError) of its MXNet and TensorFlow frontends. The job goes on."""
    x = np.arange(size() + 1, dtype=np.float32)
    if size() == 1:
        # One rank divides every first dimension evenly: the tensor comes back whole.
        np.testing.assert_array_equal(hora.alltoall(x, name="a2a.uneven"), x)
        return
    with pytest.raises(hora.InvalidCollectiveError, match="divisible by the number of workers"):
        hora.alltoall(x, name="a2a.uneven")
    even = np.arange(2 * size(), dtype=np.float32)
    out = hora.alltoall(even, name="a2a.after_uneven")
    assert out.shape == even.shape
