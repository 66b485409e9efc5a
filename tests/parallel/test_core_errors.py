"""Errors: mismatches across ranks, and arguments refused before anything is sent.

A mismatch (ranks asking for incompatible things under one name) must fail on every rank with
hora.MismatchError within seconds, name the tensor and each rank's value, and leave the job usable.
Arguments that can be checked locally (duplicate in-flight name, non-contiguous array, unsupported
dtype, bad root, bad splits) raise ValueError at once.
"""

from __future__ import annotations

import re
import time
from typing import Callable

import hora
import numpy as np
import pytest
from conftest import all_inputs, assert_same, check_next_op_works, rank, reduce_ref, size
from hora.common import ops as hops

# Generous: a mismatch is found during negotiation, not by a timeout (HORA_TIMEOUT_SECONDS).
MISMATCH_DEADLINE_SECONDS = 20.0


@pytest.fixture
def two_ranks() -> None:
    """Skip (on every rank alike) when there is only one rank: nothing can mismatch."""
    if size() < 2:
        pytest.skip("a mismatch needs at least two ranks")


needs_two_ranks = pytest.mark.usefixtures("two_ranks")


def _expect_mismatch(call: Callable[[], object], name: str, values: list[str]) -> str:
    """Run ``call`` and check it raises MismatchError naming ``name`` and every value."""
    start = time.monotonic()
    with pytest.raises(hora.MismatchError) as info:
        call()
    elapsed = time.monotonic() - start
    assert elapsed < MISMATCH_DEADLINE_SECONDS, f"mismatch took {elapsed:.1f} s to surface"
    assert isinstance(info.value, hora.HoraError)
    message = str(info.value)
    assert name in message, f"tensor name {name!r} not in: {message}"
    for value in values:
        assert re.search(value, message, re.IGNORECASE), f"{value!r} not in: {message}"
    return message


def _shape_pattern(shape: tuple[int, ...]) -> str:
    """Regex for a shape rendered as [a, b] or (a, b), spaces optional."""
    inner = r"\s*,\s*".join(str(d) for d in shape)
    return r"[\[(]\s*" + inner + r"\s*,?\s*[\])]"


# --------------------------------------------------------------------------------------------
# Mismatches across ranks


@needs_two_ranks
def test_mismatched_dtype() -> None:
    """Even ranks send float32, odd ranks int32."""
    dtype = "float32" if rank() % 2 == 0 else "int32"
    x = np.ones(8, dtype=dtype)
    _expect_mismatch(
        lambda: hora.allreduce(x, op=hora.Sum, name="mm.dtype"), "mm.dtype", ["float32", "int32"]
    )
    check_next_op_works("mm.dtype")


@needs_two_ranks
def test_mismatched_shape() -> None:
    """Every rank sends a different shape; the message lists them."""
    shape = (rank() + 1, 3)
    x = np.zeros(shape, dtype=np.float32)
    patterns = [_shape_pattern((q + 1, 3)) for q in range(size())]
    _expect_mismatch(lambda: hora.allreduce(x, op=hora.Sum, name="mm.shape"), "mm.shape", patterns)
    check_next_op_works("mm.shape")


@needs_two_ranks
def test_mismatched_same_count_different_shape() -> None:
    """Same element count, different shape: still a mismatch."""
    shape = (2, 6) if rank() == 0 else (3, 4)
    x = np.zeros(shape, dtype=np.float64)
    _expect_mismatch(
        lambda: hora.allreduce(x, op=hora.Sum, name="mm.shape2"),
        "mm.shape2",
        [_shape_pattern((2, 6)), _shape_pattern((3, 4))],
    )
    check_next_op_works("mm.shape2")


@needs_two_ranks
def test_mismatched_reduce_op() -> None:
    """Even ranks ask for Sum, odd ranks for Max."""
    op = hora.Sum if rank() % 2 == 0 else hora.Max
    x = np.ones(4, np.float32)
    _expect_mismatch(lambda: hora.allreduce(x, op=op, name="mm.op"), "mm.op", ["sum", "max"])
    check_next_op_works("mm.op")


@needs_two_ranks
def test_mismatched_collective() -> None:
    """One name, an allreduce on rank 0 and a broadcast elsewhere (through the ops layer)."""
    x = np.ones(6, np.float32)
    kind = "allreduce" if rank() == 0 else "broadcast"

    def call() -> None:
        (handle,) = hops.enqueue(kind, [x], names=["mm.kind"], op=hops.Sum, root_rank=0)
        handle.wait()

    _expect_mismatch(call, "mm.kind", ["allreduce", "broadcast"])
    check_next_op_works("mm.kind")


@needs_two_ranks
def test_mismatched_broadcast_root() -> None:
    """Each rank names itself as the root."""
    x = np.ones(5, np.int32)
    _expect_mismatch(
        lambda: hora.broadcast(x, root_rank=rank(), name="mm.root"), "mm.root", ["root"]
    )
    check_next_op_works("mm.root")


@needs_two_ranks
def test_mismatched_prescale() -> None:
    """prescale 1.5, 2.5, ... per rank."""
    factor = 1.5 + rank()
    x = np.ones(4, np.float32)
    values = [re.escape(str(1.5 + q)) for q in range(size())]
    _expect_mismatch(
        lambda: hora.allreduce(x, op=hora.Sum, prescale_factor=factor, name="mm.prescale"),
        "mm.prescale",
        ["prescale", *values],
    )
    check_next_op_works("mm.prescale")


@needs_two_ranks
def test_mismatched_postscale() -> None:
    """postscale differs on the last rank only."""
    factor = 0.5 if rank() == size() - 1 else 1.0
    x = np.ones(4, np.float64)
    _expect_mismatch(
        lambda: hora.allreduce(x, op=hora.Sum, postscale_factor=factor, name="mm.postscale"),
        "mm.postscale",
        ["postscale", r"0\.5"],
    )
    check_next_op_works("mm.postscale")


@needs_two_ranks
def test_mismatched_allgather_trailing_dims() -> None:
    """Allgather lets dim0 differ, not the other dimensions."""
    x = np.zeros((2, 3 + rank()), np.float32)
    _expect_mismatch(lambda: hora.allgather(x, name="mm.agdims"), "mm.agdims", [])
    check_next_op_works("mm.agdims")


@needs_two_ranks
def test_mismatched_allgather_ndim() -> None:
    """Allgather with a different number of dimensions on rank 0."""
    x = np.zeros((2, 3, 1) if rank() == 0 else (2, 3), np.int64)
    _expect_mismatch(lambda: hora.allgather(x, name="mm.agndim"), "mm.agndim", [])
    check_next_op_works("mm.agndim")


@needs_two_ranks
def test_mismatched_broadcast_shape() -> None:
    """Broadcast needs the same shape on every rank."""
    x = np.zeros(4 + rank(), np.uint8)
    _expect_mismatch(
        lambda: hora.broadcast(x, root_rank=0, name="mm.bcshape"),
        "mm.bcshape",
        [_shape_pattern((4,)), _shape_pattern((5,))],
    )
    check_next_op_works("mm.bcshape")


@needs_two_ranks
def test_mismatched_alltoall_dtype() -> None:
    """Alltoall with int16 on rank 0 and float16 elsewhere."""
    x = np.zeros(2 * size(), np.int16 if rank() == 0 else np.float16)
    _expect_mismatch(lambda: hora.alltoall(x, name="mm.a2a"), "mm.a2a", ["int16", "float16"])
    check_next_op_works("mm.a2a")


@needs_two_ranks
def test_mismatched_reducescatter_shape() -> None:
    """Reducescatter shapes must agree."""
    x = np.zeros((size() + rank(), 2), np.float32)
    _expect_mismatch(lambda: hora.reducescatter(x, op=hora.Sum, name="mm.rs"), "mm.rs", [])
    check_next_op_works("mm.rs")


@needs_two_ranks
def test_mismatch_inside_a_group_and_async() -> None:
    """An async mismatch fails its own handle; other tensors in flight still complete."""
    good = all_inputs(10, "float32", "mm.good")
    bad = np.zeros(3 + rank(), np.float32)
    h_good = hora.allreduce_async(good[rank()], op=hora.Sum, name="mm.async.good")
    h_bad = hora.allreduce_async(bad, op=hora.Sum, name="mm.async.bad")
    _expect_mismatch(lambda: hora.synchronize(h_bad), "mm.async.bad", [])
    assert_same(hora.synchronize(h_good), reduce_ref(good, "sum", "float32"), "float32")
    check_next_op_works("mm.async")


@needs_two_ranks
def test_repeated_mismatches_then_success() -> None:
    """Many mismatches in a row under one name, then the name works with agreeing shapes."""
    for step in range(5):
        x = np.zeros(2 + (rank() + step) % size(), np.float32)
        _expect_mismatch(
            lambda x=x: hora.allreduce(x, op=hora.Sum, name="mm.repeat"), "mm.repeat", []
        )
    xs = all_inputs(7, "float32", "mm.repeat.ok")
    out = hora.allreduce(xs[rank()], op=hora.Sum, name="mm.repeat")
    assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")


# --------------------------------------------------------------------------------------------
# Refused locally


def test_duplicate_in_flight_name() -> None:
    """A second enqueue of a name still in flight raises ValueError at once.

    Rank r first submits a name no other rank has submitted yet ("dup.r"), so that tensor cannot
    complete before the duplicate is tried; after a barrier it submits everybody else's names.
    """
    n, r = size(), rank()
    xs = all_inputs(16, "float32", "dup")
    own = hora.allreduce_async(xs[r], op=hora.Sum, name=f"dup.{r}")
    if n > 1:
        with pytest.raises(ValueError):
            hora.allreduce_async(xs[r], op=hora.Sum, name=f"dup.{r}")
    hora.barrier()
    others = {
        q: hora.allreduce_async(xs[r], op=hora.Sum, name=f"dup.{q}") for q in range(n) if q != r
    }
    expected = reduce_ref(xs, "sum", "float32")
    assert_same(hora.synchronize(own), expected, "float32")
    for handle in others.values():
        assert_same(hora.synchronize(handle), expected, "float32")
    check_next_op_works("dup")


def test_duplicate_name_in_one_call() -> None:
    """Two tensors with the same name in one enqueue call: ValueError, nothing is sent."""
    x = np.ones(4, np.float32)
    y = np.ones(4, np.float32)
    with pytest.raises(ValueError):
        hops.enqueue("allreduce", [x, y], names=["dup.same", "dup.same"], op=hops.Sum)
    check_next_op_works("dup.same")


def test_non_contiguous_is_refused() -> None:
    """Strided views are refused with ValueError (in-place ops and the ops layer)."""
    base = np.arange(40, dtype=np.float32).reshape(4, 10)
    views = [base[:, ::2], base.T, base[::2]]
    for i, view in enumerate(views):
        assert not view.flags.c_contiguous
        with pytest.raises(ValueError):
            hora.allreduce_(view, op=hora.Sum, name=f"noncontig.ar.{i}")
        with pytest.raises(ValueError):
            hora.broadcast_(view, root_rank=0, name=f"noncontig.bc.{i}")
        with pytest.raises(ValueError):
            hops.enqueue("allgather", [view], names=[f"noncontig.ag.{i}"])
    check_next_op_works("noncontig")


@pytest.mark.parametrize("dtype", ["complex64", "uint32", "uint64", "longdouble", "object"])
def test_unsupported_dtype_is_refused(dtype: str) -> None:
    """Dtypes outside the table raise ValueError for every collective."""
    x = np.zeros(4, dtype=dtype)
    calls = [
        lambda: hora.allreduce(x, op=hora.Sum, name=f"baddtype.ar.{dtype}"),
        lambda: hora.allgather(x, name=f"baddtype.ag.{dtype}"),
        lambda: hora.broadcast(x, root_rank=0, name=f"baddtype.bc.{dtype}"),
        lambda: hora.alltoall(np.zeros(2 * size(), dtype=dtype), name=f"baddtype.a2a.{dtype}"),
        lambda: hora.reducescatter(x, op=hora.Sum, name=f"baddtype.rs.{dtype}"),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()
    check_next_op_works(f"baddtype.{dtype}")


@pytest.mark.parametrize("root", ["size", "negative"])
def test_bad_broadcast_root(root: str) -> None:
    """A root outside the process set raises ValueError."""
    x = np.ones(3, np.float32)
    bad = size() if root == "size" else -1
    with pytest.raises(ValueError):
        hora.broadcast(x, root_rank=bad, name=f"badroot.{root}")
    check_next_op_works(f"badroot.{root}")


def test_alltoall_bad_splits() -> None:
    """Wrong number of splits, splits summing past dim0, negative splits, uneven equal split."""
    n = size()
    x = np.zeros((4 * n, 2), np.float32)
    cases = [
        np.ones(n + 1, np.int32),  # one entry per rank is required
        np.full(n, 5, np.int32),  # sum 5n > dim0 4n
        np.array([-1] + [1] * (n - 1), np.int32),  # negative
    ]
    for i, splits in enumerate(cases):
        with pytest.raises(ValueError):
            hora.alltoall(x, splits=splits, name=f"badsplits.{i}")
    with pytest.raises((ValueError, TypeError)):
        hora.alltoall(x, splits=np.full(n, 1.5), name="badsplits.float")
    if n > 1:
        with pytest.raises(ValueError):
            hora.alltoall(np.zeros(4 * n + 1, np.float32), name="badsplits.uneven")
    check_next_op_works("badsplits")


@pytest.mark.parametrize("op", ["min", "max", "product", "adasum"])
def test_reducescatter_unsupported_op(op: str) -> None:
    """Reducescatter supports Sum and Average only; others fail on every rank."""
    ops = {"min": hora.Min, "max": hora.Max, "product": hora.Product, "adasum": hora.Adasum}
    x = np.ones(2 * size(), np.float32)
    with pytest.raises((ValueError, hora.HoraError)):
        hora.reducescatter(x, op=ops[op], name=f"rsbadop.{op}")
    check_next_op_works(f"rsbadop.{op}")


def test_zero_dim_gather_and_scatter() -> None:
    """Allgather, alltoall and reducescatter of a 0-d tensor fail on every rank."""
    x = np.array(3.0, np.float32)
    with pytest.raises((ValueError, hora.HoraError)):
        hora.allgather(x, name="scalar.ag")
    with pytest.raises((ValueError, hora.HoraError)):
        hora.reducescatter(x, op=hora.Sum, name="scalar.rs")
    with pytest.raises((ValueError, hora.HoraError)):
        hora.alltoall(x, name="scalar.a2a")
    check_next_op_works("scalar")


def test_error_classes() -> None:
    """HoraError is a RuntimeError; the specific classes derive from it; Horovod's alias exists."""
    assert issubclass(hora.HoraError, RuntimeError)
    for cls in (
        hora.MismatchError,
        hora.errors.InternalError,
        hora.errors.TransportError,
        hora.errors.HoraTimeoutError,
        hora.errors.NotSupportedError,
        hora.errors.ShutdownError,
    ):
        assert issubclass(cls, hora.HoraError)
    assert hora.HorovodInternalError is hora.HoraError
