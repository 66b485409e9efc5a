"""Gradient averaging for training: the shared gradient reducer and the distributed optimizers.

``GradientReducer`` turns a list of gradients into their reductions across ranks with ONE call
into the engine per step for all dense gradients (one ``tf.numpy_function`` node inside a
``tf.function``), whatever the number of groups. ``DistributedGradientTape`` and every
``DistributedOptimizer`` use it.

``DistributedOptimizer`` wraps:

- a Keras 3 optimizer (``keras.optimizers.*``, what ``tf.keras`` is in TensorFlow 2.16+): the
  result is an instance of a subclass of the optimizer's class whose ``apply`` (and so
  ``apply_gradients`` and ``model.fit``) reduces the gradients first, optionally after
  ``backward_passes_per_step`` local passes (see ``hora.tensorflow.keras_optimizer``);
- a ``tf_keras`` optimizer when that package is installed;
- a TF1-style ``tf.compat.v1.train.Optimizer``: ``compute_gradients`` reduces the gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import tensorflow as tf

from hora.common.hook_driver import check_hook_options, reduce_buckets
from hora.common.ops import Adasum, Average, split_evenly
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow import _raw_ops as _raw
from hora.tensorflow.compression import Compression, Compressor
from hora.tensorflow.mpi_ops import _allreduce_indexed_slices, _scaled
from hora.tensorflow.util import default_name, grouped_names, no_autograph

__all__ = ["DistributedOptimizer", "GradientReducer", "reduce_shared"]

GroupsArg = Union[None, int, Sequence[Sequence[Any]]]


class GradientReducer:
    """Reduces gradients across the ranks of a process set, Horovod-style.

    Args:
        prefix: base of the engine names (``<prefix>.g<k>_<i>of<n>``); stable across steps so
            the engine's response cache hits.
        compression: cast applied around the wire (``Compression.none`` / ``.fp16``/ ``.bf16``).
        sparse_as_dense: reduce ``tf.IndexedSlices`` as dense tensors instead of gathering them.
        op: Average (default), Sum or Adasum.
        gradient_predivide_factor: with Average, scale by ``1/f`` before the sum and ``f/size``
            after it.
        groups: None (every dense gradient on its own), a number of groups, or lists of
            variables reduced together (a variable in no list forms a group of its own).
        process_set: the ranks that take part.
        comm_hook: ``hook(bucket) -> future`` reducing each bucket (one gradient, or one of
            ``groups``) as NumPy arrays, in eager mode (``hora.tensorflow.hooks``).

    Raises:
        ValueError: a predivide factor with an op other than Average, bad ``groups``, or a
            ``comm_hook`` with compression, an op other than Average or a predivide factor.
        TypeError: a ``comm_hook`` that is not callable.
    """

    def __init__(self, prefix: str, compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, op: int = Average,
                 gradient_predivide_factor: float = 1.0, groups: GroupsArg = None,
                 process_set: ProcessSet = global_process_set, comm_hook: Any = None) -> None:
        if comm_hook is not None:
            check_hook_options(comm_hook, compression is not Compression.none, op, Average,
                               gradient_predivide_factor, "hora.tensorflow.hooks")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if groups is not None and not isinstance(groups, (int, list, tuple)):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "tf.Variable.")
        if isinstance(groups, bool) or (isinstance(groups, int) and groups < 0):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "tf.Variable.")
        self.prefix = prefix
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.prescale = 1.0 / gradient_predivide_factor
        self.postscale = float(gradient_predivide_factor)
        self.groups = groups or None
        self.process_set = process_set
        self.comm_hook = comm_hook

    def active(self) -> bool:
        """False when the process set has one rank or this rank is not in it: the gradients then
        pass unchanged (as Horovod's optimizers and tapes leave them)."""
        return bool(self.process_set.included()) and (self.process_set.size() or 1) > 1

    def _group_indices(self, dense_at: list[int], variables: Sequence[Any] | None) -> list:
        if self.groups is None:
            # One submit per gradient: each reduction starts as soon as its gradient exists.
            return [[i] for i in dense_at]
        if isinstance(self.groups, int):
            return split_evenly(dense_at, self.groups)
        if variables is None:
            raise ValueError("groups given as lists of variables need the variables of the "
                             "gradients")
        group_of: dict[int, int] = {}
        for k, group in enumerate(self.groups):
            for var in group:
                if id(var) in group_of:
                    raise ValueError("A variable can only appear once in groups.")
                group_of[id(var)] = k
        listed: list[list[int]] = [[] for _ in self.groups]
        alone: list[list[int]] = []
        for i in dense_at:
            k = group_of.get(id(variables[i]))
            if k is None:
                alone.append([i])
            else:
                listed[k].append(i)
        return [g for g in listed if g] + alone

    @no_autograph
    def reduce(self, grads: Sequence[Any], variables: Sequence[Any] | None = None) -> list:
        """The reductions of ``grads`` (None entries stay None). Every dense group is submitted
        on its own (inside a graph, as soon as its gradients exist) and all are waited for
        together. Every rank must pass the same number of gradients with the same shapes.
        """
        grads = list(grads)
        if self.comm_hook is not None:
            return self._reduce_with_hook(grads, variables)
        if not self.active():
            return grads
        out: list = list(grads)
        dense_at: list[int] = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if self.sparse_as_dense:
                    grads[i] = tf.convert_to_tensor(g)
                    dense_at.append(i)
                else:
                    out[i] = _allreduce_indexed_slices(
                        g, default_name("allreduce", "", None, f"{self.prefix}.sparse{i}",
                                        ignore_name_scope=True),
                        self.op, self.prescale, self.postscale, self.process_set)
            else:
                dense_at.append(i)
        if not dense_at:
            return out
        groups = self._group_indices(dense_at, variables)
        compressed = {i: self.compression.compress(tf.convert_to_tensor(grads[i]))
                      for i in dense_at}
        tensors = [[compressed[i][0] for i in group] for group in groups]
        names = []
        for k, group in enumerate(groups):
            base = default_name("allreduce", "", None, f"{self.prefix}.g{k}",
                                ignore_name_scope=True)
            names.append(grouped_names(base, len(group)))
        reduced = _raw.multi_group_allreduce(tensors, names, self.op, self.prescale,
                                             self.postscale, self.process_set)
        for group, outs in zip(groups, reduced):
            for i, r in zip(group, outs):
                out[i] = self.compression.decompress(r, compressed[i][1])
        return out


    def _reduce_with_hook(self, grads: list, variables: Sequence[Any] | None) -> list:
        """The reductions of ``grads`` through ``comm_hook`` (eager mode only; sparse
        gradients are reduced as dense ones).

        Raises:
            RuntimeError: called while tracing a graph (inside ``tf.function``).
        """
        if not tf.executing_eagerly():
            raise RuntimeError(
                "comm_hook runs in eager mode only: call the training step outside tf.function "
                "(model.compile(..., run_eagerly=True) for model.fit)")
        dense_at = [i for i, g in enumerate(grads) if g is not None]
        if not dense_at:
            return grads
        arrays: list = [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads]
        names = [f"{self.prefix}.{i}" for i in range(len(grads))]
        reduced = reduce_buckets(self.comm_hook, self._group_indices(dense_at, variables),
                                 names, arrays, self.process_set)
        return [None if g is None else tf.convert_to_tensor(r, dtype=g.dtype)
                for g, r in zip(grads, reduced)]


def _scale_gradient(grad: Any, factor: float) -> Any:
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(_scaled(grad.values, factor), grad.indices, grad.dense_shape)
    return _scaled(grad, factor)


def reduce_shared(reducer: GradientReducer, grads: Sequence[Any], variables: Sequence[Any],
                  local_ids: set, scale_local: bool) -> list:
    """``grads`` reduced by ``reducer``, except those of the variables whose ``id`` is in
    ``local_ids``: those stay this rank's own, divided by the set's size when ``scale_local``
    (Horovod's ``scale_local_gradients``, applied on every rank, members of the set or not)."""
    if not local_ids:
        return reducer.reduce(grads, variables)
    shared = [i for i, v in enumerate(variables) if id(v) not in local_ids]
    reduced = reducer.reduce([grads[i] for i in shared], [variables[i] for i in shared])
    out = list(grads)
    for i, g in zip(shared, reduced):
        out[i] = g
    set_size = reducer.process_set.size() or 1
    if scale_local and set_size > 1:
        for i, v in enumerate(variables):
            if id(v) in local_ids and out[i] is not None:
                out[i] = _scale_gradient(out[i], 1.0 / set_size)
    return out


# --------------------------------------------------------------------- TF1-style optimizers


class _V1DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A ``tf.compat.v1.train.Optimizer`` whose ``compute_gradients`` reduces the gradients
    across ranks before they are applied by the wrapped optimizer."""

    def __init__(self, optimizer: tf.compat.v1.train.Optimizer, reducer: GradientReducer,
                 name: str | None = None, use_locking: bool = False,
                 scale_local_gradients: bool = True) -> None:
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._reducer = reducer
        self._local_vars: set = set()
        self._scale_local = bool(scale_local_gradients)

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient on this rank: it is not reduced across ranks."""
        self._local_vars.add(id(var))

    @no_autograph
    def compute_gradients(self, *args: Any, **kwargs: Any) -> list:
        """The wrapped optimizer's ``(gradient, variable)`` pairs with reduced gradients."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        reduced = reduce_shared(self._reducer, grads, variables, self._local_vars,
                                self._scale_local)
        return list(zip(reduced, variables))

    def apply_gradients(self, *args: Any, **kwargs: Any) -> Any:
        """Apply gradients with the wrapped optimizer."""
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's slot."""
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> list:
        """The wrapped optimizer's slot names."""
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> list:
        """The wrapped optimizer's variables."""
        return self._optimizer.variables(*args, **kwargs)


def _is_v1_optimizer(optimizer: Any) -> bool:
    return isinstance(optimizer, tf.compat.v1.train.Optimizer)


def DistributedOptimizer(optimizer: Any, name: str | None = None,
                         use_locking: bool = False, device_dense: str = "",
                         device_sparse: str = "",
                         compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, backward_passes_per_step: int = 1,
                         op: int = Average, gradient_predivide_factor: float = 1.0,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: GroupsArg = None,
                         process_set: ProcessSet = global_process_set,
                         scale_local_gradients: bool = True, comm_hook: Any = None) -> Any:
    """Wrap ``optimizer`` so that it averages gradients across ranks before applying them.

    Keras 3 (and ``tf_keras``) optimizers get the Keras wrapper (see
    ``hora.tensorflow.keras.DistributedOptimizer``, which takes the same arguments); a
    ``tf.compat.v1.train.Optimizer`` gets a wrapper whose ``compute_gradients`` reduces.

    Args:
        optimizer: the optimizer to wrap.
        name: prefix of the engine tensor names (default ``Distributed<Class>``).
        use_locking: passed to TF1 optimizers.
        device_dense: accepted for compatibility (reductions run on the host).
        device_sparse: accepted for compatibility (reductions run on the host).
        compression: ``Compression.none`` / ``.fp16`` / ``.bf16`` on the wire.
        sparse_as_dense: reduce ``tf.IndexedSlices`` as dense tensors.
        backward_passes_per_step: local passes aggregated before one reduction (Keras only).
        op: Average, Sum or Adasum.
        gradient_predivide_factor: split the averaging before and after the sum.
        average_aggregated_gradients: divide aggregated gradients by the number of passes.
        num_groups: deprecated spelling of an integer ``groups``.
        groups: number of groups or lists of variables reduced together.
        process_set: the ranks that take part.
        scale_local_gradients: divide the gradients of variables registered with
            ``register_local_var`` (kept on this rank) by the set's size.
        comm_hook: ``hook(bucket) -> future`` reducing the gradients instead of the allreduce
            (eager mode only; see ``hora.tensorflow.hooks``).

    Raises:
        ValueError: an unknown optimizer type or inconsistent arguments.
    """
    del device_dense, device_sparse
    if num_groups and groups is None:
        groups = int(num_groups)
    if op == Adasum and backward_passes_per_step > 1:
        raise ValueError("op=Adasum does not support backward_passes_per_step > 1")
    if _is_v1_optimizer(optimizer):
        if backward_passes_per_step != 1:
            raise ValueError("backward_passes_per_step > 1 is supported for Keras optimizers "
                             "only")
        prefix = name or f"Distributed{type(optimizer).__name__}"
        reducer = GradientReducer(prefix, compression, sparse_as_dense, op,
                                  gradient_predivide_factor, groups, process_set, comm_hook)
        return _V1DistributedOptimizer(optimizer, reducer, name=name, use_locking=use_locking,
                                       scale_local_gradients=scale_local_gradients)
    from hora.tensorflow import keras_optimizer

    if keras_optimizer.is_keras_optimizer(optimizer):
        return keras_optimizer.wrap(
            optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, comm_hook=comm_hook,
            scale_local_gradients=scale_local_gradients)
    raise ValueError(
        "Provided optimizer doesn't inherit from either legacy TensorFlow or Keras optimizer: "
        f"{type(optimizer).__module__}.{type(optimizer).__name__}"
    )
