"""Deadlocks: ranks blocked waiting for collectives that can never run fail, long waits do not.

When every rank a pending collective needs is blocked in a wait for a different collective,
nothing can ever release them: each waiting call must raise hora.MismatchError (a HoraError)
within seconds, naming per rank the collective it waits in and the line that submitted it, and
the job must stay usable. A rank that is not waiting (computing, checkpointing) may still submit
anything, so the others wait for it however long it takes.

At one rank nothing can deadlock: the same calls simply complete.
"""

from __future__ import annotations

import os
import time

import hora
import numpy as np
import pytest
from conftest import all_inputs, assert_same, check_next_op_works, rank, reduce_ref, size

THIS_FILE = os.path.basename(__file__)


def _expect_deadlock(call, kinds: list[str]) -> str:
    """Run ``call``; at two or more ranks it must raise MismatchError reporting a deadlock."""
    if size() == 1:
        call()
        return ""
    with pytest.raises(hora.MismatchError) as info:
        call()
    assert isinstance(info.value, hora.HoraError)
    message = str(info.value)
    assert "Deadlock" in message, message
    for q in range(size()):
        assert f"rank {q}:" in message, f"rank {q} not in: {message}"
    for kind in kinds:
        assert kind in message, f"{kind} not in: {message}"
    assert f"{THIS_FILE}:" in message, f"no call site in: {message}"
    return message


def test_barrier_against_reducescatter() -> None:
    """Rank 0 waits in a barrier while the others wait in a reducescatter."""
    x = np.ones((size() * 2, 3), dtype=np.float32)
    if rank() == 0:
        message = _expect_deadlock(lambda: hora.barrier(), ["BARRIER", "REDUCESCATTER"])
    else:
        message = _expect_deadlock(
            lambda: hora.reducescatter(x, op=hora.Sum, name="dl.rs"), ["BARRIER", "REDUCESCATTER"]
        )
    if size() > 1:
        assert "dl.rs" in message
    check_next_op_works("dl.barrier_rs")


def test_allreduce_under_different_names() -> None:
    """Even ranks allreduce 'dl.a', odd ranks 'dl.b': each name misses the other ranks."""
    name = "dl.a" if rank() % 2 == 0 else "dl.b"
    x = np.full(5, rank(), dtype=np.float32)
    message = _expect_deadlock(lambda: hora.allreduce(x, op=hora.Sum, name=name), ["ALLREDUCE"])
    if size() > 1:
        assert "dl.a'" in message and "dl.b'" in message, message
    check_next_op_works("dl.names")


def test_every_pending_collective_of_a_deadlocked_rank_fails() -> None:
    """A rank that submitted several collectives and waits for them sees all of them fail."""
    x = np.ones(4, dtype=np.float32)
    first = hora.allreduce_async(x, op=hora.Sum, name=f"dl.multi.{rank()}.first")
    second = hora.allgather_async(x, name=f"dl.multi.{rank()}.second")
    _expect_deadlock(lambda: hora.synchronize(first), ["ALLREDUCE", "ALLGATHER"])
    if size() > 1:
        with pytest.raises(hora.MismatchError):
            hora.synchronize(second)
    else:
        hora.synchronize(second)
    check_next_op_works("dl.multi")


def test_long_wait_for_a_busy_rank_is_not_ended() -> None:
    """The last rank starts an allreduce, then computes for 5 s before the next one.

    Meanwhile the others wait in that next allreduce while the busy rank's first one waits for
    them: the two ranks wait on different names, but the busy rank is not blocked, so this is a
    long wait, not a deadlock, and both complete.
    """
    early = all_inputs(11, "float32", "dl.long.early")
    later = all_inputs(17, "float32", "dl.long.later")
    if rank() == size() - 1:
        handle = hora.allreduce_async(early[rank()], op=hora.Sum, name="dl.long.early")
        time.sleep(5.0)
        out_later = hora.allreduce(later[rank()], op=hora.Sum, name="dl.long.later")
        out_early = hora.synchronize(handle)
    else:
        out_later = hora.allreduce(later[rank()], op=hora.Sum, name="dl.long.later")
        out_early = hora.allreduce(early[rank()], op=hora.Sum, name="dl.long.early")
    assert_same(out_early, reduce_ref(early, "sum", "float32"), "float32")
    assert_same(out_later, reduce_ref(later, "sum", "float32"), "float32")


def test_deadlock_is_certain_while_another_rank_computes() -> None:
    """Ranks 0 and 1 wait in different allreduces; the others compute (they poll, never block).

    Nothing the computing ranks could submit would let either allreduce run, so the two fail;
    afterwards every rank completes the next collective.
    """
    if size() < 3:
        # At 1-2 ranks the other tests cover the same ground; show the next op works.
        check_next_op_works("dl.partial.small")
        return
    if rank() < 2:
        x = np.ones(3, dtype=np.float32)
        message = None
        with pytest.raises(hora.MismatchError) as info:
            hora.allreduce(x, op=hora.Sum, name=f"dl.partial.{rank()}")
        message = str(info.value)
        assert "rank 0:" in message and "rank 1:" in message, message
        assert "rank 2:" not in message, message
    xs = all_inputs(9, "float32", "dl.partial.next")
    handle = hora.allreduce_async(xs[rank()], op=hora.Sum, name="dl.partial.next")
    if rank() >= 2:
        # Computing, as far as the engine knows: polling is not a blocking wait.
        while not hora.poll(handle):
            time.sleep(0.05)
    out = hora.synchronize(handle)
    assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")


def test_process_set_change_against_allreduce() -> None:
    """Rank 0 waits in add_process_set while the others wait in an allreduce.

    A process-set change waits for every rank's matching call, bounded by HORA_TIMEOUT_SECONDS;
    that bound is an error path, so the wait counts as blocked and the drift ends as a deadlock
    within seconds, naming the change and its line (at the timeout, rank 0 would raise
    HoraTimeoutError and the others would wait on).
    """
    if size() == 1:
        check_next_op_works("dl.set_change.small")  # the only set of one rank is the world
        return
    x = np.ones(6, dtype=np.float32)
    kinds = ["ADD_PROCESS_SET", "ALLREDUCE"]
    if rank() == 0:
        _expect_deadlock(lambda: hora.add_process_set([size() - 1]), kinds)
    else:
        _expect_deadlock(lambda: hora.allreduce(x, op=hora.Sum, name="dl.set_change"), kinds)
    check_next_op_works("dl.set_change")
