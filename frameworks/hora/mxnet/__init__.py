"""MXNet frontend of Hora with the API of ``horovod.mxnet``.

``import hora.mxnet as hvd`` runs a Horovod Gluon training script unchanged::

    hvd.init()
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1 * hvd.size()})

MXNet 1.9.1 is imported through :mod:`hora.mxnet.compat`, which puts back the NumPy names it
needs; without MXNet the import raises ImportError saying what to install. NDArrays reach the
engine through DLPack; nothing here is compiled against MXNet.
"""

from __future__ import annotations

from hora.mxnet.compat import import_mxnet

import_mxnet()

from hora.mxnet import elastic, hooks, mpi_ops
from hora.mxnet.functions import (
    allgather_object,
    broadcast_object,
    broadcast_parameters,
)
from hora.mxnet.mpi_ops import *
from hora.mxnet.optimizer import DistributedOptimizer
from hora.mxnet.trainer import Compression, DistributedTrainer

__all__ = mpi_ops.__all__ + [
    "Compression", "DistributedOptimizer", "DistributedTrainer", "allgather_object",
    "broadcast_object", "broadcast_parameters", "elastic", "hooks", "mpi_ops",
]
