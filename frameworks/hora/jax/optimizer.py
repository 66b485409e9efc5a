"""``DistributedOptimizer``: an optax ``GradientTransformation`` that averages the gradients of
every rank (one grouped allreduce per step) before the wrapped transformation sees them.

``update`` runs eagerly or inside ``jax.jit``; a jitted training step holds the reduction as one
custom call for every gradient leaf::

    @jax.jit
    def step(params, opt_state, batch):
        grads = jax.grad(loss)(params, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

With ``backward_passes_per_step = k`` the gradients of k calls are summed locally (as autograd
sums them in Horovod's torch optimizer); every k-th call reduces that sum across ranks and
applies the wrapped transformation, the others return zero updates (as ``optax.MultiSteps``).
Under jit that choice is a ``jax.lax.cond`` on the pass count, which every rank takes alike.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax

from hora.common.compression import CompressionTable, Compressor, make_compression
from hora.common.hook_driver import check_hook_options, reduce_buckets
from hora.common.ops import Adasum, Average, Sum
from hora.common.process_sets import ProcessSet, global_process_set
from hora.errors import NotSupportedError
from hora.jax.mpi_ops import grouped_allreduce

__all__ = ["Compression", "DistributedOptimizer", "DistributedState"]

Compression: type[CompressionTable]
"""The available compressors, used as ``compression=hvd.Compression.fp16``: ``none``, ``fp16``
and ``bf16`` (floating-point leaves travel in that dtype and come back in their own)."""
_, _, Compression = make_compression(
    np.dtype("float16"), np.dtype(ml_dtypes.bfloat16),
    dtype_of=lambda array: np.dtype(array.dtype),
    is_floating=lambda dtype: bool(jnp.issubdtype(dtype, jnp.floating)),
    cast=lambda array, dtype: array.astype(dtype),
)

_REDUCE_NAME = "DistributedOptimizer"


class DistributedState(NamedTuple):
    """The state of a ``DistributedOptimizer``: the wrapped transformation's state, the local
    gradient sum of the passes since the last reduction (None when
    ``backward_passes_per_step`` is 1) and how many passes that sum holds."""

    inner_state: Any
    accumulated: Any
    passes: jax.Array


def _reduce(grads: Any, compression: type[Compressor], op: int,
            process_set: ProcessSet, comm_hook: Any = None) -> Any:
    """Every leaf of ``grads`` reduced across the set in one grouped allreduce, or by
    ``comm_hook`` as one bucket."""
    leaves, treedef = jax.tree_util.tree_flatten(grads)
    if comm_hook is not None:
        return jax.tree_util.tree_unflatten(treedef, _hooked(leaves, comm_hook, process_set))
    compressed = [compression.compress(leaf) for leaf in leaves]
    reduced = grouped_allreduce([c for c, _ in compressed], name=_REDUCE_NAME, op=op,
                                process_set=process_set)
    restored = [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]
    return jax.tree_util.tree_unflatten(treedef, restored)


def _hooked(leaves: list, comm_hook: Any, process_set: ProcessSet) -> list:
    """The leaves averaged by ``comm_hook`` (eagerly, on NumPy copies), as JAX arrays."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        raise NotSupportedError(
            "DistributedOptimizer(comm_hook=...) runs the hook eagerly: call update outside "
            "jax.jit (inside it, compression=hvd.Compression.fp16 or .bf16 compresses)"
        )
    arrays = [np.asarray(leaf) for leaf in leaves]
    names = [f"{_REDUCE_NAME}.{i}" for i in range(len(arrays))]
    reduced = reduce_buckets(comm_hook, [list(range(len(arrays)))], names, arrays, process_set)
    return [jnp.asarray(r, dtype=leaf.dtype) for r, leaf in zip(reduced, leaves)]


def DistributedOptimizer(
    optimizer: optax.GradientTransformation,
    compression: type[Compressor] = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = Average,
    process_set: ProcessSet = global_process_set,
    comm_hook: Any = None,
) -> optax.GradientTransformationExtraArgs:
    """Wrap an optax transformation so that it sees gradients reduced over every rank.

    Args:
        optimizer: the optax ``GradientTransformation`` to wrap (``optax.sgd(...)``, a chain).
        compression: ``Compression.none`` (default), ``.fp16`` or ``.bf16``: the dtype of the
            floating-point gradients on the wire.
        backward_passes_per_step: calls of ``update`` whose gradients are summed locally before
            each reduction and update of the wrapped transformation.
        op: Average (default), Sum or Adasum.
        process_set: the ranks taking part.
        comm_hook: ``hook(bucket) -> future`` averaging the gradients instead of the grouped
            allreduce (``hora.jax.hooks``: ``fp16_compress``, ``bf16_compress``,
            ``PowerSGD(...)``); every leaf of a step is in one bucket. Eager only.

    Returns:
        A ``GradientTransformationExtraArgs`` whose ``init(params)`` and
        ``update(grads, state, params=None, **extra_args)`` run eagerly or inside ``jax.jit``.
        Extra arguments reach the wrapped transformation.

    Raises:
        ValueError: ``backward_passes_per_step`` is not a positive int, ``op`` is not
            Average, Sum or Adasum, or ``comm_hook`` comes with compression or another op.
        TypeError: ``optimizer`` is not an optax transformation, or ``comm_hook`` is not
            callable.
        NotSupportedError: from ``update`` inside ``jax.jit`` with a ``comm_hook``.
    """
    if (isinstance(backward_passes_per_step, bool)
            or not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1):
        raise ValueError(
            f"backward_passes_per_step must be a positive int, got {backward_passes_per_step!r}"
        )
    if op not in (Average, Sum, Adasum):
        raise ValueError(f"op must be Average, Sum or Adasum, got {op!r}")
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"expected an optax GradientTransformation, got {type(optimizer).__name__}")
    if comm_hook is not None:
        check_hook_options(comm_hook, compression is not Compression.none, op, Average, 1.0,
                           "hora.jax.hooks")
    inner = optax.with_extra_args_support(optimizer)
    passes_per_step = backward_passes_per_step

    def init(params: Any) -> DistributedState:
        accumulated = None
        if passes_per_step > 1:
            accumulated = jax.tree_util.tree_map(jnp.zeros_like, params)
        return DistributedState(inner.init(params), accumulated, jnp.zeros((), jnp.int32))

    def update(grads: Any, state: DistributedState, params: Any = None,
               **extra_args: Any) -> tuple[Any, DistributedState]:
        if passes_per_step == 1:
            reduced = _reduce(grads, compression, op, process_set, comm_hook)
            updates, inner_state = inner.update(reduced, state.inner_state, params, **extra_args)
            return updates, DistributedState(inner_state, None, state.passes)
        summed = jax.tree_util.tree_map(jnp.add, state.accumulated, grads)
        passes = state.passes + 1

        def apply(_: Any) -> tuple[Any, DistributedState]:
            reduced = _reduce(summed, compression, op, process_set, comm_hook)
            updates, inner_state = inner.update(reduced, state.inner_state, params,
                                                **extra_args)
            cleared = jax.tree_util.tree_map(jnp.zeros_like, summed)
            return updates, DistributedState(inner_state, cleared, jnp.zeros((), jnp.int32))

        def hold(_: Any) -> tuple[Any, DistributedState]:
            zeros = jax.tree_util.tree_map(jnp.zeros_like, grads)
            return zeros, DistributedState(state.inner_state, summed,
                                           jnp.asarray(passes, jnp.int32))

        if isinstance(passes, jax.core.Tracer):
            return jax.lax.cond(passes >= passes_per_step, apply, hold, None)
        return apply(None) if int(passes) >= passes_per_step else hold(None)

    return optax.GradientTransformationExtraArgs(init, update)
