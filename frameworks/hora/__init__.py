"""Hora: collective communication for data-parallel training, with Horovod's API.

``import hora`` gives the framework-neutral API on NumPy arrays; ``hora.torch`` (and the other
frontends) give the same API on framework tensors. Start N ranks with ``horarun -np N``.
"""

from hora import _core
from hora.common import api
from hora.common.api import *
from hora.common.collectives import (
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from hora.common.objects import allgather_object, broadcast_object
from hora.common.ops import AsyncResult
from hora.runner.api import run

__version__ = _core.version

__all__ = api.__all__ + [
    "AsyncResult", "allgather", "allgather_async", "allgather_object",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "broadcast_object", "grouped_allgather", "grouped_allgather_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async", "join",
    "poll", "reducescatter", "reducescatter_async", "run", "synchronize",
]
