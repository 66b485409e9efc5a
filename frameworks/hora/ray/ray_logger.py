"""Messages from a job's workers to the driver's callbacks (Horovod's
``horovod.ray.ray_logger``).

Inside a function run by an elastic :class:`~hora.ray.RayExecutor`, ``ray_logger.log({...})``
sends a dictionary to the driver, where every callback given to ``run(fn, callbacks=[...])``
is called with it. Outside such a job ``log`` does nothing.
"""

from __future__ import annotations

from typing import Any

_queue: Any = None


def configure(queue: Any) -> None:
    """Send this process's messages to ``queue`` (a ``ray.util.queue.Queue``; None: drop them)."""
    global _queue
    _queue = queue


def log(info: dict[str, Any]) -> None:
    """Send ``info`` to the driver's callbacks."""
    if _queue is not None:
        _queue.put(info)
