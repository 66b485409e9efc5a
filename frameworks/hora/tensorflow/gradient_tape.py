"""DistributedGradientTape: a ``tf.GradientTape`` whose ``gradient()`` averages across ranks.

Usage (eager or inside ``tf.function``)::

    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # reduced across ranks

The returned object is an instance of a subclass of the tape's own class sharing the tape's
recorded state, so ``isinstance(tape, tf.GradientTape)`` holds and the tape may also be
wrapped before recording (``with hvd.DistributedGradientTape(tf.GradientTape()) as tape:``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from hora.common.ops import Average
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow.compression import Compression, Compressor
from hora.tensorflow.optimizer import GradientReducer, GroupsArg, reduce_shared
from hora.tensorflow.util import no_autograph

__all__ = ["DistributedGradientTape", "PartialDistributedGradientTape"]


class _DistributedTape:
    """Mixed in front of the tape's class: reduce what ``gradient()`` returns."""

    _hora_reducer: GradientReducer
    _hora_local_sources: set
    _hora_scale_local: bool

    @no_autograph
    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: tf.UnconnectedGradients = tf.UnconnectedGradients.NONE
                 ) -> Any:
        """The gradients of ``target`` w.r.t. ``sources``, reduced across ranks (gradients of
        registered local sources are not reduced). Same arguments as ``tf.GradientTape``."""
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        result = reduce_shared(self._hora_reducer, tf.nest.flatten(grads),
                               tf.nest.flatten(sources), self._hora_local_sources,
                               self._hora_scale_local)
        return tf.nest.pack_sequence_as(grads, result)

    def register_local_source(self, source: Any) -> None:
        """Exclude ``source``'s gradient from the reduction (a variable local to this rank)."""
        self._hora_local_sources.add(id(source))


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "",
                            device_sparse: str = "",
                            compression: type[Compressor] = Compression.none,
                            sparse_as_dense: bool = False, op: int = Average,
                            gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                            groups: GroupsArg = None,
                            process_set: ProcessSet = global_process_set,
                            scale_local_gradients: bool = True,
                            comm_hook: Any = None) -> tf.GradientTape:
    """Wrap ``gradtape`` so that ``gradient()`` returns gradients reduced across ranks.

    All dense gradients of one ``gradient()`` call travel in ONE engine call (one group, or
    ``groups`` groups submitted together); ``tf.IndexedSlices`` are gathered unless
    ``sparse_as_dense``.

    Args:
        gradtape: the ``tf.GradientTape`` to wrap (recorded already or not).
        device_dense: accepted for compatibility (reductions run on the host).
        device_sparse: accepted for compatibility (reductions run on the host).
        compression: ``Compression.none`` / ``.fp16`` / ``.bf16`` on the wire.
        sparse_as_dense: reduce ``tf.IndexedSlices`` as dense tensors.
        op: Average (default), Sum or Adasum.
        gradient_predivide_factor: with Average, scale by ``1/f`` before the sum and ``f/size``
            after it.
        num_groups: deprecated spelling of an integer ``groups``.
        groups: number of groups, or lists of variables reduced together.
        process_set: the ranks that take part.
        scale_local_gradients: divide the gradients of local sources (see
            ``register_local_source``) by the set size.
        comm_hook: ``hook(bucket) -> future`` reducing the gradients instead of the allreduce
            (eager mode only; see ``hora.tensorflow.hooks``).

    Raises:
        ValueError: a predivide factor with an op other than Average, bad ``groups``, or a
            ``comm_hook`` with compression, another op or a predivide factor.
    """
    del device_dense, device_sparse
    if num_groups and groups is None:
        groups = int(num_groups)
    base = type(gradtape)
    if issubclass(base, _DistributedTape):
        raise TypeError("the tape is already a DistributedGradientTape")
    cls = type(base.__name__, (_DistributedTape, base), {"__module__": base.__module__})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._hora_reducer = GradientReducer("DistributedGradientTape", compression,
                                         sparse_as_dense, op, gradient_predivide_factor, groups,
                                         process_set, comm_hook)
    tape._hora_local_sources = set()
    tape._hora_scale_local = bool(scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape: tf.GradientTape,
                                   local_layers: Any = None, **kwargs: Any) -> tf.GradientTape:
    """A ``DistributedGradientTape`` that leaves the gradients of ``local_layers`` (a Keras layer
    or a list of layers, whose weights differ by rank) unreduced. Other arguments as for
    ``DistributedGradientTape``."""
    tape = DistributedGradientTape(gradtape, **kwargs)
    if local_layers is None:
        return tape
    layers = local_layers if isinstance(local_layers, Iterable) else [local_layers]
    for layer in layers:
        for weight in getattr(layer, "trainable_weights", [layer]):
            tape.register_local_source(weight)
    return tape
