"""TensorFlow frontend of Hora with the API of ``horovod.tensorflow`` (TensorFlow 2.16+).

``import hora.tensorflow as hvd`` runs a Horovod TensorFlow 2 training script::

    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    ...
    hvd.broadcast_variables(model.variables, root_rank=0)

Operations run eagerly and inside ``tf.function``. Nothing is compiled against TensorFlow: a
collective is a Python call on the tensors' NumPy values (one ``tf.numpy_function`` node inside
a graph), so one build of Hora serves every TensorFlow version.
"""

from __future__ import annotations

import hora as _hora
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
from hora.common.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from hora.errors import HoraError, HorovodInternalError, HostsUpdatedInterrupt
from hora.tensorflow import mpi_ops
from hora.tensorflow.compression import Compression
from hora.tensorflow.functions import (
    allgather_object,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from hora.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from hora.tensorflow.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    reducescatter,
    size_op,
)
from hora.tensorflow.optimizer import DistributedOptimizer

start_timeline = getattr(_hora, "start_timeline", None)
stop_timeline = getattr(_hora, "stop_timeline", None)

__all__ = [
    "Adasum", "Average", "Compression", "DistributedGradientTape", "DistributedOptimizer",
    "HoraError", "HorovodInternalError", "HostsUpdatedInterrupt", "Max", "Min",
    "PartialDistributedGradientTape", "ProcessSet", "Product", "Sum", "add_process_set",
    "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast",
    "broadcast_", "broadcast_global_variables", "broadcast_object", "broadcast_object_fn",
    "broadcast_variables", "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built",
    "global_process_set", "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allreduce",
    "grouped_reducescatter", "init", "is_homogeneous", "is_initialized", "join",
    "local_rank", "local_rank_op", "local_size", "local_size_op", "mpi_built", "mpi_enabled",
    "mpi_ops", "mpi_threads_supported", "nccl_built", "process_set_included_op", "rank",
    "rank_op", "reducescatter", "remove_process_set", "rocm_built", "shutdown", "size",
    "size_op", "start_timeline", "stop_timeline",
]
