"""The public names every frontend shares, defined once.

``hora`` and each frontend (``hora.torch``, ``hora.tensorflow``, ``hora.mxnet``, Keras) start
from this list and extend it with their own collectives and wrappers::

    from hora.common.api import *
    from hora.common import api
    __all__ = api.__all__ + ["allreduce", ...]
"""

from __future__ import annotations

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
    start_timeline,
    stop_timeline,
)
from hora.common.ops import Adasum, Average, Max, Min, Product, Sum
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
    InvalidCollectiveError,
    MismatchError,
    NotSupportedError,
    ShutdownError,
    TransportError,
)

__all__ = [
    "Adasum", "Average", "HoraError", "HoraTimeoutError", "HorovodInternalError",
    "HostsUpdatedInterrupt", "InternalError", "InvalidCollectiveError", "Max", "Min",
    "MismatchError", "NotSupportedError", "ProcessSet", "Product", "ShutdownError", "Sum",
    "TransportError", "add_process_set", "ccl_built", "cross_rank", "cross_size", "cuda_built",
    "ddl_built", "global_process_set", "gloo_built", "gloo_enabled", "init", "is_homogeneous",
    "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "rank", "remove_process_set", "rocm_built",
    "shutdown", "size", "start_timeline", "stop_timeline",
]
