"""Hora: collective communication for data-parallel training, with Horovod's API.

``import hora`` gives the framework-neutral API on NumPy arrays; ``hora.torch`` (and the other
frontends) give the same API on framework tensors. Start N ranks with ``horarun -np N``.
"""

from hora import _core
from hora.common.basics import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
)
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
from hora.common.ops import Adasum, AsyncResult, Average, Max, Min, Product, Sum
from hora.common.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from hora.errors import (
    HoraError,
    HoraTimeoutError,
    HorovodInternalError,
    HostsUpdatedInterrupt,
    InternalError,
    MismatchError,
    NotSupportedError,
    ShutdownError,
    TransportError,
)

__version__ = _core.version

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled", "gloo_built",
    "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "mpi_threads_supported",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "AsyncResult",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "poll", "synchronize", "broadcast_object", "allgather_object",
    "HoraError", "InternalError", "MismatchError", "TransportError", "HoraTimeoutError",
    "NotSupportedError", "ShutdownError", "HorovodInternalError", "HostsUpdatedInterrupt",
]
