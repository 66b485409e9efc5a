"""PyTorch frontend of Hora with the API of ``horovod.torch``.

``import hora.torch as hvd`` runs a Horovod PyTorch training script unchanged::

    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Tensors reach the engine through DLPack; nothing here is compiled against torch.

Importing this package also registers Hora as a ``torch.distributed`` backend:
``torch.distributed.init_process_group(backend="hora")`` (see ``distributed_backend``).
"""

from __future__ import annotations

import torch as _torch

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

if _torch.distributed.is_available():
    from hora.torch import _dist_rendezvous, distributed_backend

    distributed_backend.register()
    _dist_rendezvous.install()

__all__ = mpi_ops.__all__ + [
    "DistributedOptimizer", "SyncBatchNorm", "ZeroRedundancyOptimizer", "allgather_object",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "elastic", "hooks",
    "mpi_ops",
]
