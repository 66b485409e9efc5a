"""Small allreduces folded from the data published with their agreement round (``folded_ops``,
HORA_AGREEMENT_PAYLOADS, docs/tuning.md).

On one host over shared memory, a cached tensor is agreed on through the agreement board. A rank
that holds one small allreduce alone publishes its data with the round; when every rank did, each
folds the round's payloads in rank order instead of exchanging the data again
(core/coordinator/local_agreement.h). The results must be exactly the exchange's, for every dtype
and op; what is checked beside them is the count of folded allreduces, never a time. The test
command runs this file with HORA_AGREEMENT_PAYLOADS=0 at 3 and 4 ranks too: the same results,
and nothing folded.
"""

from __future__ import annotations

import os

import hora
import numpy as np
import pytest
from conftest import (
    DTYPES,
    NARROW_INT_DTYPES,
    OPS,
    agrees_locally,
    all_inputs,
    assert_close,
    assert_same,
    check_next_op_works,
    kind_for_op,
    np_dtype,
    rank,
    reduce_ref,
    size,
)

STEPS = 4  # the first call of a name negotiates it in full; the others are cached
COUNTS = [0, 1, 17, 1001]


def _folded() -> int:
    return int(hora._core.engine_counters()["folded_ops"])


def _publishes() -> bool:
    """Whether the ranks publish payloads with their rounds: more than one rank, agreeing on
    cached tensors without rank 0 (``agrees_locally``: all on this host over shared memory, not
    under MPI, the cache and local agreement on), and HORA_AGREEMENT_PAYLOADS on (``auto``: at
    most two ranks per CPU online)."""
    setting = os.environ.get("HORA_AGREEMENT_PAYLOADS", "auto").lower()
    wanted = setting in ("1", "true", "yes") or (
        setting == "auto" and hora.local_size() <= 2 * (os.cpu_count() or 1))
    return wanted and size() > 1 and agrees_locally()


def _folds(dtype: str, op: str, count: int) -> bool:
    """Whether the engine may fold this allreduce (core/ops/ops.h, foldsFromPayloads): reduced
    in its own dtype (not an 8/16-bit integer Average, summed in int32, nor a half-precision Sum
    or Average, summed in float32), and small: at most 4 KiB, and at most 32 KiB over all ranks."""
    if op == "average" and dtype in NARROW_INT_DTYPES:
        return False
    if op in ("sum", "average") and dtype in ("float16", "bfloat16"):
        return False
    nbytes = count * np_dtype(dtype).itemsize
    return nbytes <= min(4096, (32 << 10) // size(), 8 << 10)


def _same_on_every_rank(value: int) -> list[int]:
    return [int(v) for v in hora.allgather(np.array([value], np.int64), name="ef.count")]


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_small_allreduces_match_numpy(dtype: str) -> None:
    """Every op and size, each name called STEPS times with new data: every result is NumPy's,
    and the ranks fold the same calls (each decides from the same rounds)."""
    folded_before = _folded()
    may_fold = 0
    for op in OPS:
        for count in COUNTS:
            name = f"ef.{dtype}.{op}.{count}"
            for step in range(STEPS):
                xs = all_inputs(count, dtype, name, step, kind=kind_for_op(op))
                out = hora.allreduce(xs[rank()], op=OPS[op], name=name)
                expected = reduce_ref(xs, op, dtype)
                if op == "average":
                    assert_close(out, expected, dtype)
                else:
                    assert_same(out, expected, dtype)
                if step > 0 and _folds(dtype, op, count):
                    may_fold += 1
    folded = _folded() - folded_before
    counts = _same_on_every_rank(folded)
    assert counts == [folded] * size(), counts
    if not _publishes():
        assert folded == 0
    elif may_fold > 0:
        assert 0 < folded <= may_fold, (folded, may_fold)
    else:
        assert folded == 0
    check_next_op_works(f"ef.{dtype}")


def test_what_cannot_fold_is_exchanged() -> None:
    """A prescaled allreduce, a float16 sum and one over 4 KiB are cached but never folded, and
    are still right."""
    before = _folded()
    for step in range(STEPS):
        xs = all_inputs(9, "float32", "ef.pre", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="ef.pre", prescale_factor=2.0)
        assert_close(out, reduce_ref(xs, "sum", "float32", prescale=2.0), "float32")
        xs = all_inputs(9, "float16", "ef.half", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="ef.half")
        assert_same(out, reduce_ref(xs, "sum", "float16"), "float16")
        xs = all_inputs(1025, "float32", "ef.large", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="ef.large")
        assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")
    assert _folded() == before
    check_next_op_works("ef.not")


def test_async_allreduces_in_flight_together_are_right() -> None:
    """Several small allreduces in flight at once: a round then holds more than one tensor, and
    whatever a rank published with it, every result is NumPy's."""
    for step in range(STEPS):
        inputs = [all_inputs(5, "int32", "ef.async", i, step) for i in range(6)]
        handles = [
            hora.allreduce_async(xs[rank()], op=hora.Sum, name=f"ef.async.{i}")
            for i, xs in enumerate(inputs)
        ]
        for h, xs in zip(handles, inputs):
            assert_same(hora.synchronize(h), reduce_ref(xs, "sum", "int32"), "int32")
    check_next_op_works("ef.async")
