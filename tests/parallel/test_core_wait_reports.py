"""What a rank tells the coordinator about its blocking waits, and what it need not tell.

Rank 0 counts a rank as blocked (for deadlock detection) only while that rank's last report is
current: no batch was built after it. A wait that its own collective released needs no
"no longer blocked" report (the batch that completed it made the last report stale), and none is
sent; a wait that ends otherwise (here: an alarm's exception) must still be told, or rank 0 would
keep the rank blocked and fail a long wait of another rank as a deadlock.

The counts come from hora._core.engine_counters(), never from timings.
"""

from __future__ import annotations

import signal
import time

import hora
import numpy as np
import pytest
from conftest import all_inputs, assert_same, check_next_op_works, rank, reduce_ref, size


class _Alarm(Exception):
    """Raised by the SIGALRM handler to end a wait."""


def _interrupted_wait(handle: int, seconds: float) -> None:
    """Wait for ``handle`` until a signal interrupts the wait after ``seconds`` (it must not
    finish first)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise _Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with pytest.raises(_Alarm):
            hora.synchronize(handle)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _wait_end_reports() -> int:
    return int(hora._core.engine_counters()["wait_end_reports"])


def test_counters_are_exposed() -> None:
    """Every counter is a non-negative integer, and a blocking collective moves the totals."""
    before = hora._core.engine_counters()
    assert set(before) == {
        "control_messages_sent", "loop_wakeups", "wait_end_reports", "caller_ops",
        "folded_ops", "agreed_rounds", "loop_cycles"}
    check_next_op_works("wr.counters")
    after = hora._core.engine_counters()
    for key, value in after.items():
        assert isinstance(value, int) and value >= before[key] >= 0, (key, before, after)
    if size() > 1:
        # Every rank sent something for that allreduce: its request, or (rank 0) the response.
        assert after["control_messages_sent"] > before["control_messages_sent"], (before, after)


def test_wait_released_by_its_collective_sends_no_report() -> None:
    """The workers block in an allreduce that rank 0 submits late; its completion ends the waits.

    Each worker reported itself blocked while it waited (its loop had sent the request before the
    wait began); the response batch made that report stale, so no "no longer blocked" report
    follows, not even after the loop has gone round again.
    """
    xs = all_inputs(7, "float32", "wr.released")
    before = _wait_end_reports()
    if rank() == 0:
        time.sleep(0.3)  # the others are blocked by now (or soon): either way they must not report
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="wr.released")
    else:
        handle = hora.allreduce_async(xs[rank()], op=hora.Sum, name="wr.released")
        time.sleep(0.05)  # the request goes out first, so the wait is reported on its own
        out = hora.synchronize(handle)
        time.sleep(0.1)  # the loop's next cycles, where a report would go
    assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")
    assert _wait_end_reports() == before
    check_next_op_works("wr.released")


@pytest.mark.parametrize("interrupted", ["rank0", "workers"])
def test_interrupted_wait_leaves_no_blocked_state(interrupted: str) -> None:
    """One side's blocking wait ends by an alarm's exception; it computes, the other side waits.

    The interrupted side (rank 0, or every other rank) waits in 'wr.x.*', which the other side
    submits only later; an alarm ends that wait, and it then computes for 1.5 s (longer than rank
    0 takes to confirm a deadlock) before submitting 'wr.y.*'. Meanwhile the other side blocks in
    'wr.y.*'. Had rank 0 kept the interrupted side blocked, the two waits would look like a
    deadlock and fail; both must complete, and 'wr.x.*' after them.
    """
    if size() == 1:
        check_next_op_works(f"wr.interrupt.{interrupted}.small")
        return
    name_x, name_y = f"wr.x.{interrupted}", f"wr.y.{interrupted}"
    xs = all_inputs(5, "float32", name_x)
    ys = all_inputs(6, "float32", name_y)
    is_interrupted = (rank() == 0) == (interrupted == "rank0")
    if is_interrupted:
        reports = _wait_end_reports()
        handle = hora.allreduce_async(xs[rank()], op=hora.Sum, name=name_x)
        _interrupted_wait(handle, 0.3)
        time.sleep(1.5)  # computing: not blocked, though 'wr.x' is still pending
        if rank() != 0:
            # Reported blocked in 'wr.x' (no batch was built since), so the end was reported.
            assert _wait_end_reports() > reports
        out_y = hora.allreduce(ys[rank()], op=hora.Sum, name=name_y)
        out_x = hora.synchronize(handle)
    else:
        out_y = hora.allreduce(ys[rank()], op=hora.Sum, name=name_y)
        out_x = hora.allreduce(xs[rank()], op=hora.Sum, name=name_x)
    assert_same(out_x, reduce_ref(xs, "sum", "float32"), "float32")
    assert_same(out_y, reduce_ref(ys, "sum", "float32"), "float32")


def test_real_deadlock_after_an_interrupted_wait_is_still_reported() -> None:
    """After an interrupted wait, ranks that then block in different allreduces still deadlock.

    The last rank's wait in an allreduce nobody else submits is interrupted (it reported itself
    blocked, then not); then every rank blocks in an allreduce under a name of its own parity.
    The error names each rank and both names, and also fails the last rank's first allreduce.
    """
    x = np.ones(3, dtype=np.float32)
    if size() == 1:
        check_next_op_works("wr.real.small")
        return
    last = rank() == size() - 1
    if last:
        lonely = hora.allreduce_async(x, op=hora.Sum, name="wr.real.lonely")
        _interrupted_wait(lonely, 0.2)
    name = "wr.real.even" if rank() % 2 == 0 else "wr.real.odd"
    with pytest.raises(hora.MismatchError) as info:
        hora.allreduce(x, op=hora.Sum, name=name)
    message = str(info.value)
    assert "Deadlock" in message, message
    for q in range(size()):
        assert f"rank {q}:" in message, message
    assert "wr.real.even'" in message and "wr.real.odd'" in message, message
    assert "wr.real.lonely'" in message, message
    if last:
        with pytest.raises(hora.MismatchError):
            hora.synchronize(lonely)
    check_next_op_works("wr.real")
