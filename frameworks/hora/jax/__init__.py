"""JAX frontend of Hora with the API shape of Horovod's frontends.

``import hora.jax as hvd``; collectives take and return ``jax.Array`` values and run eagerly,
outside ``jax.jit`` (inside it they raise ``NotSupportedError``)::

    hvd.init()
    params = hvd.broadcast_parameters(params, root_rank=0)
    opt = hvd.DistributedOptimizer(optax.sgd(0.1))
    opt_state = opt.init(params)
    grads = jax.jit(jax.grad(loss))(params, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)

Arrays reach the engine through DLPack or one host copy; nothing here is compiled against JAX.
"""

from __future__ import annotations

from hora.jax import elastic, hooks, mpi_ops
from hora.jax.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from hora.jax.mpi_ops import *
from hora.jax.optimizer import Compression, DistributedOptimizer, DistributedState

__all__ = mpi_ops.__all__ + [
    "Compression", "DistributedOptimizer", "DistributedState", "allgather_object",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "elastic", "hooks",
    "mpi_ops",
]
