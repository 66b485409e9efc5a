"""Broadcast of parameter and optimizer-state pytrees, and of arbitrary Python objects."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from hora.common import ops
from hora.common.objects import allgather_object, broadcast_object
from hora.common.process_sets import ProcessSet, global_process_set
from hora.jax.mpi_ops import grouped_broadcast_as, refuse_traced

__all__ = [
    "allgather_object", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters",
]


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray))


def broadcast_parameters(params: Any, root_rank: int = 0, name: str = "parameters",
                         process_set: ProcessSet = global_process_set) -> Any:
    """Return ``params`` as it is on ``root_rank``, on every rank of the set.

    Args:
        params: any pytree (dict, list, tuple, NamedTuple, dataclass registered with JAX, ...)
            of the same structure on every rank. Its array leaves travel as one grouped
            broadcast (``grouped_broadcast.<name>_<i>of<n>``, fused by the engine); any other
            leaves (Python numbers, strings) as one pickled object (``broadcast.<name>.objects``).
        root_rank: the global rank whose values are kept.
        name: keeps the tensors of separate calls apart; equal on every rank.
        process_set: the ranks taking part.

    Returns:
        A pytree of the same structure holding the root's values (JAX arrays for array leaves).

    Raises:
        NotSupportedError: a leaf is traced (inside jax.jit).
        HoraError: the ranks disagree on the leaves' shapes or dtypes, or the job failed.
    """
    leaves, treedef = jax.tree_util.tree_flatten(params)
    refuse_traced(leaves, "broadcast_parameters")
    arrays = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]
    others = [i for i, leaf in enumerate(leaves) if not _is_array(leaf)]
    out = list(leaves)
    if arrays:
        set_id = ops.process_set_id(process_set)
        names = ops.group_names("grouped_broadcast", name, len(arrays), set_id)
        values = grouped_broadcast_as([leaves[i] for i in arrays], names, root_rank,
                                      "broadcast_parameters", process_set)
        for i, value in zip(arrays, values):
            out[i] = value
    if others:
        values = broadcast_object([leaves[i] for i in others], root_rank, f"{name}.objects",
                                  process_set)
        for i, value in zip(others, values):
            out[i] = value
    return jax.tree_util.tree_unflatten(treedef, out)


def broadcast_optimizer_state(opt_state: Any, root_rank: int = 0,
                              name: str = "optimizer_state",
                              process_set: ProcessSet = global_process_set) -> Any:
    """Return an optax optimizer state (any pytree) as it is on ``root_rank``.

    The same as :func:`broadcast_parameters` under another default ``name``.

    Raises:
        NotSupportedError: a leaf is traced (inside jax.jit).
        HoraError: the ranks disagree on the leaves' shapes or dtypes, or the job failed.
    """
    return broadcast_parameters(opt_state, root_rank, name, process_set)
