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

from hora.common import api
from hora.common.api import *
from hora.tensorflow import elastic, hooks, mpi_ops
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
from hora.tensorflow.util import (
    _executing_eagerly,  # noqa: F401 (Horovod's tests use it)
    gpu_available,
)

__all__ = api.__all__ + [
    "Compression", "DistributedGradientTape", "DistributedOptimizer",
    "PartialDistributedGradientTape", "allgather", "allgather_object", "allreduce", "alltoall",
    "barrier", "broadcast", "broadcast_", "broadcast_global_variables", "broadcast_object",
    "broadcast_object_fn", "broadcast_variables", "elastic", "gpu_available", "grouped_allgather",
    "grouped_allreduce", "grouped_reducescatter", "hooks", "join", "local_rank_op", "local_size_op",
    "mpi_ops",
    "process_set_included_op", "rank_op", "reducescatter", "size_op",
]
