"""PyTorch frontend of Hora with the API of ``horovod.torch``.

``import hora.torch as hvd`` runs a Horovod PyTorch training script unchanged::

    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Tensors reach the engine through DLPack; nothing here is compiled against torch.
"""

from __future__ import annotations

from hora.torch import elastic, hooks, mpi_ops
from hora.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from hora.torch.mpi_ops import *
from hora.torch.optimizer import DistributedOptimizer
from hora.torch.sync_batch_norm import SyncBatchNorm
from hora.torch.zero import ZeroRedundancyOptimizer

__all__ = mpi_ops.__all__ + [
    "DistributedOptimizer", "SyncBatchNorm", "ZeroRedundancyOptimizer", "allgather_object",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "elastic", "hooks",
    "mpi_ops",
]
