"""The elastic driver's worker pool: stopping workers does not hold up the driver.

Workers run on this machine only (no ssh, no network)."""

from __future__ import annotations

import os
import queue
import signal
import sys

from hora.runner.elastic.workers import LaunchInfo, WorkerPool

# A worker that ignores SIGTERM, as a rank stuck in a collective may: only SIGKILL ends it.
STUBBORN = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('up', flush=True)\n"
            "time.sleep(120)\n")


class _Lines:
    def __init__(self) -> None:
        self.lines: queue.Queue[bytes] = queue.Queue()

    def line(self, rank: int, stream: str, data: bytes) -> None:
        self.lines.put(data)

    def close(self) -> None:
        pass


def test_stop_returns_at_once_and_the_grace_then_ends_a_worker_that_ignores_it(tmp_path):
    """stop() asks and returns (the driver forms the next generation meanwhile); the worker
    keeps its slot until it ends; enforce() SIGKILLs it once its grace ran out, not before."""
    sink = _Lines()
    pool = WorkerPool(sink)
    info = LaunchInfo([sys.executable, "-c", STUBBORN], {"PATH": os.environ["PATH"]}, "s3cret",
                      "127.0.0.1", 4242, None, frozenset(), str(tmp_path))
    try:
        worker = pool.start(info, "localhost", 1)
        assert sink.lines.get(timeout=60).strip() == b"up"
        pool.stop([worker], grace=600.0)
        assert worker.child.process.poll() is None, "stop() waited for the worker"
        assert pool.alive() == [] and pool.count_on("localhost") == 1
        pool.enforce()
        assert worker.kill_at is not None and worker.child.process.poll() is None
        pool.enforce(now=worker.kill_at)
        assert pool.exits.get(timeout=30) == (worker.id, -signal.SIGKILL)
        assert worker.kill_at is None
    finally:
        pool.close()
