"""A thread waiting for its collective runs it itself (HORA_CALLER_DRIVES, docs/tuning.md).

On one host with the response cache on, a cached tensor needs no message to rank 0: the waiting
thread may then agree on it and reduce it without handing it to the background thread. Under the
default ``auto`` it does so when each rank of the host has a CPU of its own. What is checked is
the count of collectives run by waiting threads (``caller_ops``), never a time.
"""

from __future__ import annotations

import os

import hora
import numpy as np
from conftest import all_inputs, assert_same, check_next_op_works, rank, reduce_ref, size


def _caller_ops() -> int:
    return int(hora._core.engine_counters()["caller_ops"])


def _expected() -> bool:
    """Whether waiting threads should drive here: more than one rank, all on this host and on
    shared memory (the transport ``tcp+shm``: under MPI there is no agreement board), the cache
    on, and under ``auto`` as many CPUs for this process as the host runs ranks
    (core/common/spin.h's ``oversubscribed``: a rank bound to one CPU does not qualify)."""
    env = os.environ.get
    if size() < 2 or hora.local_size() != size():
        return False
    if hora._core.transport_name() != "tcp+shm":
        return False
    if env("HORA_SHM_DISABLE", "0") != "0" or env("HORA_CACHE_CAPACITY", "1") == "0":
        return False
    if env("HORA_SHM_LOCAL_AGREEMENT", "1") == "0" or env("HORA_AUTOTUNE", "0") != "0":
        return False
    setting = env("HORA_CALLER_DRIVES", "auto").lower()
    if setting in ("0", "false", "no"):
        return False
    if setting != "auto":
        return True
    return len(os.sched_getaffinity(0)) >= hora.local_size()


def test_cached_allreduces_are_right_and_run_by_the_waiting_thread() -> None:
    """200 blocking allreduces of one name (cached after the first), each checked."""
    before = _caller_ops()
    for step in range(200):
        xs = all_inputs(5, "float32", "cd.cached", step)
        out = hora.allreduce(xs[rank()], op=hora.Sum, name="cd.cached")
        assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")
    ran = _caller_ops() - before
    if _expected():
        assert ran > 0, hora._core.engine_counters()
    else:
        assert ran == 0, hora._core.engine_counters()
    check_next_op_works("cd.cached")


def test_uncached_and_cached_mixed() -> None:
    """A new name now and then (only rank 0 can answer it) between cached ones: all right."""
    for step in range(60):
        name = f"cd.fresh.{step}" if step % 10 == 0 else "cd.mixed"
        x = np.full(3, float(rank() + step), dtype=np.float32)
        out = hora.allreduce(x, op=hora.Sum, name=name)
        want = np.full(3, float(size() * (size() - 1) // 2 + size() * step), dtype=np.float32)
        np.testing.assert_array_equal(out, want)
