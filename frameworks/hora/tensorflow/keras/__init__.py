"""Keras frontend of Hora with the API of ``horovod.tensorflow.keras``, for Keras 3 (what
``tf.keras`` is in TensorFlow 2.16+) on the TensorFlow backend, and for ``tf_keras`` when it is
installed.

    import hora.tensorflow.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

``hora.keras`` is the same module.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from hora.common import api
from hora.common.api import *
from hora.common.ops import Adasum, Average, Sum
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow import functions as _functions
from hora.tensorflow import hooks
from hora.tensorflow import keras_optimizer as _kopt
from hora.tensorflow import mpi_ops as _mpi_ops
from hora.tensorflow.compression import Compression, Compressor
from hora.tensorflow.keras import callbacks, elastic
from hora.tensorflow.optimizer import GroupsArg

__all__ = api.__all__ + [
    "Compression", "DistributedOptimizer", "PartialDistributedOptimizer", "allgather",
    "allgather_object", "allreduce", "broadcast", "broadcast_global_variables", "broadcast_object",
    "broadcast_variables", "callbacks", "elastic", "hooks", "load_model", "reducescatter",
]

broadcast_object = _functions.broadcast_object
allgather_object = _functions.allgather_object
broadcast_variables = _functions.broadcast_variables


def DistributedOptimizer(optimizer: Any, name: str | None = None,
                         device_dense: str = "", device_sparse: str = "",
                         compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: int = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: GroupsArg = None,
                         process_set: ProcessSet = global_process_set,
                         scale_local_gradients: bool = True, comm_hook: Any = None) -> Any:
    """A Keras optimizer that averages gradients across ranks before applying them.

    Returns an instance of a subclass of ``optimizer``'s class built from its configuration, so
    it drops into ``model.compile(optimizer=...)``. Every step reduces all dense gradients in
    one engine call (``groups`` > 1 submits several groups in that call).

    Args:
        optimizer: a Keras 3 optimizer (or a tf_keras one when installed).
        name: prefix of the engine tensor names (default ``Distributed<Class>``).
        device_dense: accepted for compatibility (reductions run on the host).
        device_sparse: accepted for compatibility (reductions run on the host).
        compression: ``Compression.none`` / ``.fp16`` / ``.bf16`` on the wire.
        sparse_as_dense: reduce ``tf.IndexedSlices`` (embedding gradients) as dense tensors.
        gradient_predivide_factor: with Average, scale by ``1/f`` before the sum and ``f/size``
            after it.
        op: Average (default), Sum or Adasum.
        backward_passes_per_step: sum the gradients of this many ``apply`` calls locally and
            reduce and apply once; the other calls only advance ``optimizer.iterations``.
        average_aggregated_gradients: divide the locally summed gradients by
            ``backward_passes_per_step``.
        num_groups: deprecated spelling of an integer ``groups``.
        groups: number of groups, or lists of variables reduced together.
        process_set: the ranks that take part.
        scale_local_gradients: divide the gradients of variables registered with the
            optimizer's ``register_local_var`` (kept on this rank) by the set's size.
        comm_hook: ``hook(bucket) -> future`` reducing the gradients instead of the allreduce
            (eager mode only: ``run_eagerly=True`` for ``model.fit``; ``hora.tensorflow.hooks``).

    Raises:
        ValueError: not a Keras optimizer, or inconsistent arguments.
    """
    del device_dense, device_sparse
    if num_groups and groups is None:
        groups = int(num_groups)
    if not _kopt.is_keras_optimizer(optimizer):
        raise ValueError(
            "hora.tensorflow.keras.DistributedOptimizer needs a Keras optimizer, got "
            f"{type(optimizer).__module__}.{type(optimizer).__name__}"
        )
    if op == Adasum and backward_passes_per_step > 1:
        raise ValueError("op=Adasum does not support backward_passes_per_step > 1")
    return _kopt.wrap(optimizer, name=name, compression=compression,
                      sparse_as_dense=sparse_as_dense,
                      gradient_predivide_factor=gradient_predivide_factor, op=op,
                      backward_passes_per_step=backward_passes_per_step,
                      average_aggregated_gradients=average_aggregated_gradients, groups=groups,
                      process_set=process_set, comm_hook=comm_hook,
                      scale_local_gradients=scale_local_gradients)


def PartialDistributedOptimizer(optimizer: Any, name: str | None = None,
                                device_dense: str = "", device_sparse: str = "",
                                compression: type[Compressor] = Compression.none,
                                sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0, op: int = Average,
                                backward_passes_per_step: int = 1,
                                average_aggregated_gradients: bool = False,
                                groups: GroupsArg = None,
                                process_set: ProcessSet = global_process_set,
                                local_layers: Any = None,
                                scale_local_gradients: bool = True) -> Any:
    """A ``DistributedOptimizer`` that leaves the gradients of ``local_layers`` (a Keras layer or
    a list of layers whose weights differ by rank) on this rank: they are not reduced, and are
    divided by the set's size when ``scale_local_gradients``. Without ``local_layers`` it is a
    plain ``DistributedOptimizer``. Other arguments as for ``DistributedOptimizer``.

    Raises:
        ValueError: ``op`` other than Average or Sum, bad ``groups``, or a local layer that is
            not a Keras layer (Horovod's checks).
    """
    if op not in (Average, Sum):
        raise ValueError("op currently only supports Average and Sum")
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    opt = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def broadcast_global_variables(root_rank: int) -> Any:
    """Broadcast the global variables of a TF1-style graph from ``root_rank``.

    Raises:
        RuntimeError: in eager mode; use ``callbacks.BroadcastGlobalVariablesCallback`` with
            ``model.fit`` or ``broadcast_variables(model.variables, root_rank)``.
    """
    return _functions.broadcast_global_variables(root_rank)


def allreduce(value: Any, name: str | None = None, average: bool | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              op: int | None = None,
              compression: type[Compressor] = Compression.none,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Allreduce a tensor-compatible value (Average by default); returns a tensor."""
    return _mpi_ops.allreduce(tf.convert_to_tensor(value), average=average, name=name, op=op,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, compression=compression,
                              process_set=process_set)


def allgather(value: Any, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenate a tensor-compatible value from every rank along dim 0; returns a tensor."""
    return _mpi_ops.allgather(tf.convert_to_tensor(value), name=name, process_set=process_set)


def broadcast(value: Any, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """``root_rank``'s value of a tensor-compatible value; returns a tensor."""
    return _mpi_ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name,
                              process_set=process_set)


def reducescatter(value: Any, name: str | None = None, op: int = Average,
                  process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Reduce a tensor-compatible value and return this rank's rows; returns a tensor."""
    return _mpi_ops.reducescatter(tf.convert_to_tensor(value), name=name, op=op,
                                  process_set=process_set)


def load_model(filepath: str, custom_optimizers: list | None = None,
               custom_objects: dict | None = None,
               compression: type[Compressor] = Compression.none, **kwargs: Any) -> Any:
    """Load a saved Keras model whose optimizer then reduces gradients across ranks.

    The optimizer is restored with its state (slots, iterations) and its class switched to the
    distributed subclass, so training resumes where it stopped.

    Args:
        filepath: a ``.keras`` file (or anything ``keras.models.load_model`` accepts).
        custom_optimizers: optimizer classes the file uses besides Keras's own.
        custom_objects: further custom objects for deserialization.
        compression: ``Compression`` used by the restored optimizer.
        **kwargs: passed to ``keras.models.load_model``.
    """
    import keras

    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects.setdefault(cls.__name__, cls)
    model = keras.models.load_model(filepath, custom_objects=objects or None, **kwargs)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and _kopt.is_keras_optimizer(optimizer):
        _kopt.convert_in_place(optimizer, compression=compression)
    return model
