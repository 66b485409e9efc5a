"""Collective operations on TensorFlow tensors with ``horovod.tensorflow``'s signatures.

Every operation works eagerly and inside ``tf.function`` and is differentiable
(``tf.custom_gradient``), following Horovod's conventions:

- allreduce: the gradient is the allreduce of the output gradient (same op and scale factors);
- allgather: Average-allreduce of the output gradient, then this rank's rows;
- broadcast: Average-allreduce of the output gradient on the root, zero on the other ranks;
- alltoall: alltoall of the output gradient back with the received splits;
- reducescatter: allgather of the output gradient, times the set size for Sum, then the
  prescale and postscale factors (Horovod's rule).

Static shapes: allreduce and broadcast keep the input shape; allgather and alltoall leave dim 0
unknown; reducescatter knows its rows when dim 0 is static.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import tensorflow as tf

from hora.common import basics, gradients
from hora.common import basics as _basics  # noqa: F401  (Horovod's name for this module)
from hora.common import ops as _ops
from hora.common.ops import Adasum, Average, Max, Min, Product, Sum
from hora.common.process_sets import ProcessSet, global_process_set, process_set_by_id
from hora.tensorflow import _raw_ops as _raw
from hora.tensorflow import _submit_wait
from hora.tensorflow._host import host_view, private
from hora.tensorflow.compression import Compression, Compressor
from hora.tensorflow.util import (
    check_dtype,
    default_name,
    group_base_name,
    grouped_names,
    no_autograph,
)

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum",
    "allgather", "allreduce", "alltoall", "barrier", "broadcast", "broadcast_",
    "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "join",
    "local_rank_op", "local_size_op", "process_set_included_op", "rank_op", "reducescatter",
    "size_op",
]

SplitsLike = Union[None, Sequence[int], np.ndarray, tf.Tensor]


def _find_could_record() -> Callable[[], bool] | None:
    """TensorFlow's test for an active gradient tape (its module moved between versions)."""
    for module_name in ("tensorflow.python.eager.record", "tensorflow.python.eager.tape"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        fn = getattr(module, "could_possibly_record", None)
        if callable(fn):
            return fn
    return None


_could_record = _find_could_record()


def _differentiable(forward: Callable[..., Any], *tensors: tf.Tensor) -> Any:
    """``forward(*tensors)`` (which returns outputs and their gradient function) as a
    ``tf.custom_gradient`` op; eagerly with no tape recording, just the outputs (the gradient
    bookkeeping costs more than a small collective)."""
    if tf.executing_eagerly() and _could_record is not None and not _could_record():
        return forward(*tensors)[0]
    return tf.custom_gradient(forward)(*tensors)


def _resolve_op(op: int | None, average: bool | None) -> int:
    return _ops.handle_average_backwards_compatibility(op, average)


def _or_zeros(dy: tf.Tensor | None, like: tf.Tensor) -> tf.Tensor:
    return tf.zeros_like(like) if dy is None else tf.convert_to_tensor(dy)


def _grad_node(rule: Callable[..., gradients.Finish], dys: list[tf.Tensor],
               xs: Sequence[tf.Tensor], op_name: str, *extra: tf.Tensor) -> list[tf.Tensor]:
    """A gradient rule of ``hora.common.gradients`` as a submit node and a wait node (so that
    ranks running gradient nodes in different orders never deadlock; see ``_submit_wait``):
    ``rule(buffers, *extra)`` gets private copies of the output gradients and the host values
    of ``extra`` and returns its ``finish``, whose list of results take the dtypes and static
    shapes of the inputs ``xs``."""
    count = len(dys)

    def start(sources: list) -> gradients.Finish:
        return rule([private(x) for x in sources[:count]],
                    *[host_view(x) for x in sources[count:]])

    outs = _submit_wait.run(start, [*dys, *extra], [x.dtype for x in xs], op_name)
    for out, x in zip(outs, xs):
        out.set_shape(x.shape)
    return outs


def _with_gradient(tensors: list[tf.Tensor], forward: Callable[[list], list],
                   backward: Callable[[list, list], list]) -> list[tf.Tensor]:
    """``forward(xs)`` as a differentiable op (one output per input): ``backward(dys, xs)``
    gives the input gradients, a missing output gradient counting as zeros."""

    def op(*xs: tf.Tensor) -> Any:
        ys = forward(list(xs))

        def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
            return backward([_or_zeros(d, y) for d, y in zip(dys, ys)], list(xs))

        return (ys[0] if len(ys) == 1 else ys), grad

    out = _differentiable(op, *tensors)
    return [out] if len(tensors) == 1 else list(out)


def _scaled(tensor: tf.Tensor, factor: float) -> tf.Tensor:
    if factor == 1.0:
        return tensor
    if tensor.dtype.is_floating:
        return tensor * tf.constant(factor, tensor.dtype)
    return tf.cast(tf.cast(tensor, tf.float64) * factor, tensor.dtype)


# ------------------------------------------------------------------------------------ allreduce


def _grouped_allreduce_dense(tensors: list[tf.Tensor], names: list[str], op: int,
                             prescale: float, postscale: float,
                             process_set: ProcessSet) -> list[tf.Tensor]:
    """Differentiable grouped allreduce of dense tensors (one engine group, one call)."""

    def backward(dys: list, xs: list) -> list:
        gradients.check_differentiable(op, "allreduce")
        base = group_base_name("allreduce", "HorovodAllreduceGrad", dys, None)
        grad_names = [base] if len(dys) == 1 else grouped_names(base, len(dys))
        return _grad_node(lambda bufs: gradients.allreduce_grad(
            bufs, op, prescale, postscale, process_set, grad_names), dys, xs,
            "HorovodAllreduceGrad")

    return _with_gradient(tensors, lambda xs: _raw.grouped_allreduce(
        xs, names, op, prescale, postscale, process_set), backward)


def _check_sparse_op(op: int) -> None:
    """Raise Horovod's error for a reduce op that IndexedSlices do not take."""
    if op == Adasum:
        raise NotImplementedError(
            "The Adasum reduction does not currently support sparse tensors; pass "
            "sparse_as_dense=True to reduce them as dense tensors"
        )
    if op not in (Average, Sum):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")


def _check_sparse_scale(prescale: float, postscale: float) -> None:
    if prescale != 1.0 or postscale != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _allreduce_indexed_slices(slices: tf.IndexedSlices, name: str | None, op: int,
                              prescale: float, postscale: float,
                              process_set: ProcessSet) -> tf.IndexedSlices:
    """Sparse allreduce: allgather of values and indices (one call). Average divides the
    gathered values by the set size with TensorFlow's ``/`` (integer values become floats, as
    in Horovod); scale factors (from a gradient predivide factor) multiply them."""
    _check_sparse_op(op)
    base = default_name("allreduce", "HorovodAllgather", slices.values, name)
    values, indices = _raw.grouped_allgather(
        [slices.values, slices.indices], [f"{base}.values", f"{base}.indices"], process_set)
    if op == Average:
        values = values / tf.cast(process_set.size(), values.dtype)
    values = _scaled(values, prescale * postscale)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@no_autograph
def allreduce(tensor: tf.Tensor | tf.IndexedSlices, average: bool | None = None,
              device_dense: str = "", device_sparse: str = "",
              compression: type[Compressor] = Compression.none, op: int | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              name: str | None = None, process_set: ProcessSet = global_process_set,
              ignore_name_scope: bool = False) -> tf.Tensor | tf.IndexedSlices:
    """Reduce ``tensor`` over every rank of ``process_set``; returns a new tensor.

    ``op`` is Average (default), Sum, Adasum, Min, Max or Product; ``average=`` is the deprecated
    spelling. ``tf.IndexedSlices`` are gathered (values and indices) instead, for Average and Sum.
    ``device_dense`` / ``device_sparse`` are accepted for compatibility; the reduction runs on the
    host. Differentiable for Average and Sum.

    Raises:
        ValueError: ``average`` together with ``op``, or an unsupported dtype.
        tf.errors.OpError / HoraError: the ranks disagree on shape, dtype or op (inside a
            ``tf.function`` the error arrives as a TensorFlow op error carrying Hora's message).
    """
    op = _resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_op(op)
        _check_sparse_scale(prescale_factor, postscale_factor)
        check_dtype(tensor.values, "allreduce")
        return _allreduce_indexed_slices(tensor, name, op, prescale_factor, postscale_factor,
                                         process_set)
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "allreduce")
    compressed, ctx = compression.compress(tensor)
    engine_name = default_name("allreduce", "HorovodAllreduce", tensor, name, ignore_name_scope)
    reduced = _grouped_allreduce_dense([compressed], [engine_name], op, prescale_factor,
                                       postscale_factor, process_set)[0]
    return compression.decompress(reduced, ctx)


@no_autograph
def grouped_allreduce(tensors: Sequence[tf.Tensor | tf.IndexedSlices],
                      average: bool | None = None, device_dense: str = "",
                      device_sparse: str = "", compression: type[Compressor] = Compression.none,
                      op: int | None = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set,
                      ignore_name_scope: bool = False,
                      name: str | None = None) -> list:
    """Allreduce a list of tensors as one group (negotiated and fused together, in one call);
    returns a list. ``tf.IndexedSlices`` entries are gathered as in ``allreduce``."""
    op = _resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        _check_sparse_op(op)
        _check_sparse_scale(prescale_factor, postscale_factor)
    results: list = [None] * len(tensors)
    dense_at = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            check_dtype(t.values, "grouped_allreduce")
            results[i] = _allreduce_indexed_slices(t, None, op, prescale_factor,
                                                   postscale_factor, process_set)
    if dense_at:
        dense = [tf.convert_to_tensor(tensors[i]) for i in dense_at]
        for t in dense:
            check_dtype(t, "grouped_allreduce")
        pairs = [compression.compress(t) for t in dense]
        base = group_base_name("grouped_allreduce", "HorovodGroupedAllreduce", dense, name)
        reduced = _grouped_allreduce_dense([p[0] for p in pairs],
                                           grouped_names(base, len(dense)), op, prescale_factor,
                                           postscale_factor, process_set)
        for i, r, (_, ctx) in zip(dense_at, reduced, pairs):
            results[i] = compression.decompress(r, ctx)
    return results


# ------------------------------------------------------------------------------------ allgather


def _grouped_allgather(tensors: list[tf.Tensor], names: list[str],
                       process_set: ProcessSet) -> list[tf.Tensor]:
    def backward(dys: list, xs: list) -> list:
        dims = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in xs])
        base = group_base_name("allreduce", "HorovodAllgatherGrad", dys, None)
        reduce_names = grouped_names(base, len(dys))
        dims_name = default_name("allgather", "HorovodAllgatherGradDims", dims, None)
        return _grad_node(lambda bufs, d: gradients.allgather_grad(
            bufs, d.tolist(), process_set, reduce_names, dims_name), dys, xs,
            "HorovodAllgatherGrad", dims)

    return _with_gradient(tensors, lambda xs: _raw.grouped_allgather(xs, names, process_set),
                          backward)


@no_autograph
def allgather(tensor: tf.Tensor, name: str | None = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenate ``tensor`` from every rank of the set along dim 0 (which may differ by rank).

    Differentiable: the gradient is this rank's rows of the averaged output gradient.
    """
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "allgather")
    engine_name = default_name("allgather", "HorovodAllgather", tensor, name, ignore_name_scope)
    return _grouped_allgather([tensor], [engine_name], process_set)[0]


@no_autograph
def grouped_allgather(tensors: Sequence[tf.Tensor], name: str | None = None,
                      ignore_name_scope: bool = False,
                      process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Allgather a list of tensors as one group (one call); returns a list. Differentiable."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    for t in tensors:
        check_dtype(t, "grouped_allgather")
    base = group_base_name("grouped_allgather", "HorovodGroupedAllgather", tensors, name)
    return _grouped_allgather(tensors, grouped_names(base, len(tensors)), process_set)


# ------------------------------------------------------------------------------------ broadcast


@no_autograph
def broadcast(tensor: tf.Tensor, root_rank: int, name: str | None = None,
              ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Return ``root_rank``'s value of ``tensor`` (``root_rank`` is a global rank).

    Differentiable: the gradient is the averaged output gradient on the root, zero elsewhere.
    """
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "broadcast")
    engine_name = default_name("broadcast", "HorovodBroadcast", tensor, name, ignore_name_scope)

    def backward(dys: list, xs: list) -> list:
        grad_name = default_name("allreduce", "HorovodBroadcastGrad", dys[0], None)
        return _grad_node(lambda bufs: gradients.broadcast_grad(
            bufs, root_rank, process_set, [grad_name]), dys, xs, "HorovodBroadcastGrad")

    return _with_gradient([tensor], lambda xs: _raw.grouped_broadcast(
        xs, [engine_name], root_rank, process_set), backward)[0]


def assign_from_root(variables: list, root_rank: int, name: str | None,
                     process_set: ProcessSet, what: str = "broadcast_") -> list:
    """Broadcast the values of ``variables`` (tf or Keras variables) in one call and assign
    them; returns the assignment results (operations while tracing)."""
    if not variables:
        return []
    values = [tf.convert_to_tensor(v) for v in variables]
    for v in values:
        check_dtype(v, what)
    base = group_base_name("broadcast", "HorovodBroadcastInplace", values, name)
    names = [base] if len(values) == 1 else grouped_names(base, len(values))
    received = _raw.grouped_broadcast(values, names, root_rank, process_set)
    # A deep copy: the received buffers may lie in the job's shared arena, and a variable
    # assigned a tensor nothing else holds takes over its buffer, which then kept the arena
    # mapped for the variable's lifetime, past shutdown.
    return [var.assign(tf.raw_ops.DeepCopy(x=value)) for var, value in zip(variables, received)]


@no_autograph
def broadcast_(variables: Any, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> Any:
    """Overwrite ``variables`` (a list of ``tf.Variable`` or Keras variables; or one variable)
    in place with ``root_rank``'s values, in one call.

    Returns, as Horovod does, the updated values for a list (inside a graph, tensors whose
    evaluation runs the broadcast and the assignments); a single variable is returned itself.
    """
    single = not isinstance(variables, (list, tuple))
    assigned = assign_from_root([variables] if single else list(variables), root_rank, name,
                                process_set)
    if single:
        return variables
    if tf.executing_eagerly():
        return [tf.convert_to_tensor(v) for v in variables]
    values = []
    for var, update in zip(variables, assigned):
        with tf.control_dependencies([update]):
            values.append(tf.identity(tf.convert_to_tensor(var)))
    return values


# ------------------------------------------------------------------------------------- alltoall


@no_autograph
def alltoall(tensor: tf.Tensor, splits: SplitsLike = None, name: str | None = None,
             ignore_name_scope: bool = False,
             process_set: ProcessSet = global_process_set) -> tf.Tensor | tuple:
    """Send ``splits[j]`` rows of ``tensor`` to set rank j and receive the rows sent here.

    ``splits`` (int32, one entry per rank, sum at most dim 0) defaults to equal parts. Returns
    the received rows, or ``(output, received_splits)`` when ``splits`` was given.
    Differentiable: the gradient travels back by an alltoall with the received splits.
    """
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "alltoall")
    split_tensor = None if splits is None else tf.convert_to_tensor(splits)
    if split_tensor is not None and not split_tensor.dtype.is_integer:
        raise ValueError("splits must be a 1-D tensor of integers (int32)")
    engine_name = default_name("alltoall", "HorovodAlltoall", tensor, name, ignore_name_scope)
    received_holder: list[tf.Tensor] = []

    def forward(x: tf.Tensor) -> Any:
        out, received = _raw.alltoall(x, split_tensor, engine_name, process_set)
        received_holder.append(received)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            dy = _or_zeros(dy, out)
            grad_name = default_name("alltoall", "HorovodAlltoallGrad", dy, None)

            def rule(bufs: list, splits: np.ndarray, dim0: np.ndarray) -> gradients.Finish:
                finish = gradients.alltoall_grad(bufs[0], splits.tolist(), int(dim0),
                                                 process_set, grad_name)
                return lambda: [finish()]

            return _grad_node(rule, [dy], [x], "HorovodAlltoallGrad", received,
                              tf.shape(x)[0])[0]

        return out, grad

    output = _differentiable(forward, tensor)
    if splits is None:
        return output
    return output, tf.stop_gradient(received_holder[0])


# -------------------------------------------------------------------------------- reducescatter


def _grouped_reducescatter(tensors: list[tf.Tensor], names: list[str], op: int,
                           prescale: float, postscale: float,
                           process_set: ProcessSet) -> list[tf.Tensor]:
    def backward(dys: list, xs: list) -> list:
        base = group_base_name("allgather", "HorovodReducescatterGrad", dys, None)
        grad_names = grouped_names(base, len(dys))
        return _grad_node(lambda bufs: gradients.reducescatter_grad(
            bufs, op, prescale, postscale, process_set, grad_names), dys, xs,
            "HorovodReducescatterGrad")

    return _with_gradient(tensors, lambda xs: _raw.grouped_reducescatter(
        xs, names, op, prescale, postscale, process_set), backward)


@no_autograph
def reducescatter(tensor: tf.Tensor, device_dense: str = "",
                  compression: type[Compressor] = Compression.none, op: int = Average,
                  name: str | None = None, process_set: ProcessSet = global_process_set,
                  ignore_name_scope: bool = False, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> tf.Tensor:
    """Reduce ``tensor`` over the set (Average or Sum) and return this rank's rows of dim 0;
    the first ``dim0 % size`` ranks get one row more. Differentiable."""
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "reducescatter")
    compressed, ctx = compression.compress(tensor)
    engine_name = default_name("reducescatter", "HorovodReducescatter", tensor, name,
                               ignore_name_scope)
    out = _grouped_reducescatter([compressed], [engine_name], op, prescale_factor,
                                 postscale_factor, process_set)[0]
    return compression.decompress(out, ctx)


@no_autograph
def grouped_reducescatter(tensors: Sequence[tf.Tensor], device_dense: str = "",
                          compression: type[Compressor] = Compression.none, op: int = Average,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          name: str | None = None) -> list[tf.Tensor]:
    """Reducescatter a list of tensors as one group (one call); returns a list."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    for t in tensors:
        check_dtype(t, "grouped_reducescatter")
    pairs = [compression.compress(t) for t in tensors]
    base = group_base_name("grouped_reducescatter", "HorovodGroupedReducescatter", tensors, name)
    outs = _grouped_reducescatter([p[0] for p in pairs], grouped_names(base, len(tensors)), op,
                                  prescale_factor, postscale_factor, process_set)
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ------------------------------------------------------------------- join, barrier, rank ops


@no_autograph
def join() -> tf.Tensor:
    """Declare that this rank has no more data; until every rank joined, it contributes zeros
    to the others' allreduces. Returns the last rank that joined (int32, equal everywhere)."""
    return _raw.join()


@no_autograph
def barrier(process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Block until every rank of ``process_set`` reached the barrier (returns an int32 0)."""
    return _raw.barrier(process_set)


@no_autograph
def size_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """The number of ranks of a process set, as an int32 tensor evaluated when the op runs."""
    return _raw.runtime_value(lambda: process_set_by_id(process_set_id).size(),
                              name or "HorovodSize")


@no_autograph
def local_size_op(name: str | None = None) -> tf.Tensor:
    """The number of ranks on this host, as an int32 tensor evaluated when the op runs."""
    return _raw.runtime_value(basics.local_size, name or "HorovodLocalSize")


@no_autograph
def rank_op(name: str | None = None) -> tf.Tensor:
    """This process's rank, as an int32 tensor evaluated when the op runs."""
    return _raw.runtime_value(basics.rank, name or "HorovodRank")


@no_autograph
def local_rank_op(name: str | None = None) -> tf.Tensor:
    """This process's rank on its host, as an int32 tensor evaluated when the op runs."""
    return _raw.runtime_value(basics.local_rank, name or "HorovodLocalRank")


@no_autograph
def process_set_included_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """1 when this process belongs to the process set, else 0 (int32, evaluated at run time)."""
    return _raw.runtime_value(lambda: int(bool(process_set_by_id(process_set_id).included())),
                              name or "HorovodProcessSetIncluded")
