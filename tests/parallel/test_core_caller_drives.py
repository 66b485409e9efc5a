"""A thread waiting for its collective runs it itself (HORA_CALLER_DRIVES, docs/tuning.md).

On one host with the response cache on, a cached tensor needs no message to rank 0: the waiting
thread may then agree on it and reduce it without handing it to the background thread. Under the
default ``auto`` it does so while the host runs at most two ranks per CPU. What is checked is
the count of collectives run by waiting threads (``caller_ops``), never the time one takes (one
test bounds the background thread's own cycles by the time a run of calls took: a rate).
"""

from __future__ import annotations

import os
import time

import hora
import numpy as np
from conftest import (
    agrees_locally,
    all_inputs,
    assert_same,
    check_next_op_works,
    rank,
    reduce_ref,
    size,
)


def _caller_ops() -> int:
    return int(hora._core.engine_counters()["caller_ops"])


def _expected() -> bool | None:
    """Whether waiting threads drive here: where cached tensors are agreed on without rank 0
    (``agrees_locally``: one rank alone, whatever its transport, or every rank on this host and
    on shared memory, the cache on), and under ``auto`` at most two ranks per CPU online on the
    host (core/common/spin.h's ``callerDrivesByDefault``). None when on with more ranks than CPUs:
    a waiting thread may then stop polling (HORA_SPIN_ADAPTIVE) before it drives, so whether it
    does is up to the scheduler."""
    env = os.environ.get
    if not agrees_locally():
        return False
    setting = env("HORA_CALLER_DRIVES", "auto").lower()
    if setting in ("0", "false", "no"):
        return False
    cpus = os.cpu_count() or 1
    if setting == "auto" and hora.local_size() > 2 * cpus:
        return False
    return True if hora.local_size() <= cpus else None


def test_cached_allreduces_are_right_and_run_by_the_waiting_thread() -> None:
    """200 blocking allreduces of one name (cached after the first), each checked."""
    before = _caller_ops()
    for step in range(200):
        xs = all_inputs(5, "float32", "cd.cached", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="cd.cached")
        assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")
    ran = _caller_ops() - before
    expected = _expected()
    if expected:
        assert ran > 0, hora._core.engine_counters()
    elif expected is not None:
        assert ran == 0, hora._core.engine_counters()
    check_next_op_works("cd.cached")


def test_each_blocking_cached_call_is_one_agreed_round() -> None:
    """``agreed_rounds`` counts the rounds of local agreement: a blocking call of a cached tensor
    is one round of its own where the ranks agree locally (the next call waits for it), and
    none where rank 0 negotiates every tensor."""
    for _ in range(3):  # cached
        hora.allreduce(np.ones(3, np.float32), op=hora.Sum, name="cd.rounds")
    before = hora._core.engine_counters()["agreed_rounds"]
    for _ in range(20):
        hora.allreduce(np.ones(3, np.float32), op=hora.Sum, name="cd.rounds")
    ran = hora._core.engine_counters()["agreed_rounds"] - before
    assert ran == (20 if agrees_locally() else 0), hora._core.engine_counters()


def test_blocking_calls_leave_the_background_thread_asleep() -> None:
    """A blocking call's waiting thread does the work, and the background thread keeps out of its
    way: the engine does not wake it for the call (far fewer wake-ups asked than calls, where
    every call asks one otherwise), and it parks instead of watching for the other ranks'
    rounds, so nearly every call is run by its waiting thread (without parking, the two threads
    split them). A wake-up is still owed when a wait outlasts its poll (another rank was slow),
    so a few may come. ``loop_wakeups`` counts the wake-ups asked, also one that finds another
    still pending: how many reach the thread depends on how the threads interleave."""
    for _ in range(20):  # cached, and the background thread parked
        hora.allreduce(np.ones(2, np.float32), op=hora.Sum, name="cd.asleep")
    before = hora._core.engine_counters()
    calls = 200
    for _ in range(calls):
        out = hora.allreduce(np.ones(2, np.float32), op=hora.Sum, name="cd.asleep")
        np.testing.assert_array_equal(out, np.full(2, size(), np.float32))
    after = hora._core.engine_counters()
    woken = after["loop_wakeups"] - before["loop_wakeups"]
    ran = after["caller_ops"] - before["caller_ops"]
    expected = _expected()
    if expected:
        assert woken < calls // 2 and ran >= calls * 4 // 5, (woken, ran)
    elif expected is not None:
        assert woken >= calls and ran == 0, (woken, ran)


def test_a_parked_background_thread_sleeps_through_a_run_of_blocking_calls() -> None:
    """While waiting threads drive, the background thread parks, and the timers of its cycle
    (collecting a burst, local agreement's) are theirs: it wakes by itself only at the end of
    its park slice (10 ms), not each millisecond, where it took the CPU from the calls. Checked
    on one rank, where no wait outlasts its poll: with more, a wait that does (another rank was
    slow) wakes the thread, as it must. What is counted is cycles against the time the calls
    took, so a slow machine changes both alike."""
    if size() != 1 or not _expected():
        return
    for _ in range(20):  # cached, and the background thread parked
        hora.allreduce_(np.ones(2, np.float32), op=hora.Sum, name="cd.parked")
    before = hora._core.engine_counters()["loop_cycles"]
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < 0.1:
        for _ in range(100):
            hora.allreduce_(np.ones(2, np.float32), op=hora.Sum, name="cd.parked")
        calls += 100
    elapsed_ms = (time.perf_counter() - start) * 1e3
    cycles = hora._core.engine_counters()["loop_cycles"] - before
    assert cycles <= elapsed_ms / 4 + 3, (cycles, elapsed_ms, calls)


def test_a_barrier_is_agreed_on_by_its_cache_slot() -> None:
    """After the first, a barrier is reported by its cache slot, as a cached collective is: on
    one host it needs no message to rank 0 (where it was negotiated in full, every barrier sent
    one or more), and where waiting threads drive, they run it. That barriers still hold every
    rank: test_core_misc.py's test_barrier_orders_side_effects."""
    hora.barrier()
    before = hora._core.engine_counters()
    calls = 100
    for _ in range(calls):
        hora.barrier()
    after = hora._core.engine_counters()
    sent = after["control_messages_sent"] - before["control_messages_sent"]
    ran = after["caller_ops"] - before["caller_ops"]
    if agrees_locally():
        assert sent < calls // 4, (sent, after)
    expected = _expected()
    if expected:
        assert ran >= calls * 4 // 5, (ran, after)
    elif expected is not None:
        assert ran == 0, (ran, after)


def test_uncached_and_cached_mixed() -> None:
    """A new name now and then (only rank 0 can answer it) between cached ones: all right."""
    for step in range(60):
        name = f"cd.fresh.{step}" if step % 10 == 0 else "cd.mixed"
        x = np.full(3, float(rank() + step), dtype=np.float32)
        out = hora.allreduce(x, op=hora.Sum, name=name)
        want = np.full(3, float(size() * (size() - 1) // 2 + size() * step), dtype=np.float32)
        np.testing.assert_array_equal(out, want)
