"""The timeline recorded by a real job: valid JSON at every moment, the expected rows and events,
and hora-timeline's summary and plot on it."""

from __future__ import annotations

import json
import os
import tempfile
import time

import hora
import numpy as np
from conftest import rank, size
from hora.timeline import format_summary, load, summarize


def _shared_path() -> str:
    """One path for every rank (only rank 0 writes it)."""
    name = f"hora_timeline_{os.environ.get('HORA_RENDEZVOUS_PORT', os.getppid())}.json"
    return os.path.join(tempfile.gettempdir(), name)


def _read_while_written(path: str) -> list:
    """The timeline as it stands while rank 0's writer may be appending to it.

    Every write leaves the file valid JSON; a read that overlaps a write can still see the old
    closing bracket followed by the new tail, so a failed parse is retried (a file that is left
    invalid fails every attempt).
    """
    for _ in range(50):
        with open(path) as f:
            text = f.read()
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            time.sleep(0.01)
    return json.loads(text)


def _windows_in_use() -> bool:
    """Allreduces of this job run in the shared-memory windows."""
    return (size() > 1 and hora._core.transport_name() == "tcp+shm"
            and os.environ.get("HORA_SHM_WINDOW_BYTES", "1") != "0")


def test_timeline_is_valid_json_throughout_and_summarizes(tmp_path) -> None:
    path = _shared_path()
    hora.start_timeline(path, mark_cycles=True)
    snapshots = []
    try:
        for step in range(6):
            grads = [np.full(1024 * (i + 1), float(rank()), np.float32) for i in range(3)]
            handles = [
                hora.allreduce_async_(g, name=f"timeline.grad{i}", op=hora.Sum)
                for i, g in enumerate(grads)
            ]
            for h in handles:
                hora.synchronize(h)
            want = sum(range(size()))
            assert all(np.all(g == want) for g in grads)
            if rank() == 0:
                snapshots.append(_read_while_written(path))  # valid while the job runs
        hora.barrier()
    finally:
        hora.stop_timeline()
    if rank() != 0:
        return
    with open(path) as f:
        events = json.loads(f.read())
    assert all(isinstance(s, list) for s in snapshots)
    names = {e.get("name") for e in events}
    rows = {e["args"]["name"] for e in events if e.get("name") == "process_name" and e["pid"] > 0}
    assert {"allreduce.timeline.grad0", "allreduce.timeline.grad2"} <= rows
    assert "NEGOTIATE_ALLREDUCE" in names and "ALLREDUCE" in names
    assert "CYCLE_START" in names and "STEP" in names
    assert any(n.endswith("_ALLREDUCE") and n != "NEGOTIATE_ALLREDUCE" for n in names if n)
    if _windows_in_use():
        # Fused tensors (larger together than a shared payload) go into the shared windows
        # directly, with no fusion buffer.
        assert "SHM_ALLREDUCE" in names
        assert not {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"} & names
    ticks = {e["name"] for e in events if e.get("ph") == "X"}
    assert ticks == {str(r) for r in range(size())}
    assert any(e.get("args", {}).get("dtype") == "float32" for e in events)

    summary = summarize(load(path))
    text = format_summary(summary)
    assert "ALLREDUCE" in text and "timeline.grad1" in text
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    from hora.timeline.plot import plot

    out = tmp_path / "timeline.png"
    plot(load(path), str(out))
    assert out.stat().st_size > 1000
    os.unlink(path)
