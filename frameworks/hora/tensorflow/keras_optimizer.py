"""Distributed Keras optimizers: Keras 3 (``keras`` / ``tf.keras`` in TensorFlow 2.16+) and,
when installed, ``tf_keras``.

``wrap(optimizer, ...)`` returns an instance of a subclass of the optimizer's own class (same
name, same module, built from ``optimizer.get_config()``), so ``isinstance`` checks, saving and
``model.fit`` behave as with the original. The subclass overrides:

- Keras 3: ``apply`` (``apply_gradients`` and ``model.fit`` go through it). The gradients are
  reduced across ranks (each reduction submitted as soon as its gradient exists), then the original ``apply`` runs (clipping, loss
  scaling, weight decay and the update see the reduced gradients, identical on every rank).
  With ``backward_passes_per_step = k > 1`` gradients are summed locally into accumulator
  variables (optimizer variables named ``hora_accumulator``) and reduced and applied every k-th
  call; the other calls only advance ``optimizer.iterations``.
- tf_keras: ``apply_gradients`` (``backward_passes_per_step`` must be 1).

Variables registered with ``register_local_var`` keep this rank's own gradients (divided by the
set's size when ``scale_local_gradients``, as Horovod does); ``PartialDistributedOptimizer``
registers the weights of its ``local_layers`` so.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from hora.common.ops import Average
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow.compression import Compression, Compressor
from hora.tensorflow.optimizer import GradientReducer, GroupsArg, reduce_shared
from hora.tensorflow.util import no_autograph

__all__ = ["distributed_class", "is_distributed", "is_keras_optimizer", "wrap"]


@dataclass(frozen=True)
class _Settings:
    """What a distributed optimizer class does besides its base class's work."""

    reducer: GradientReducer
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = False
    scale_local_gradients: bool = True


def _keras3_base() -> type | None:
    try:
        import keras
    except ImportError:
        return None
    return keras.optimizers.Optimizer


def _tf_keras_bases() -> tuple:
    if "tf_keras" not in sys.modules and importlib.util.find_spec("tf_keras") is None:
        return ()
    import tf_keras

    bases = [tf_keras.optimizers.Optimizer]
    legacy = getattr(getattr(tf_keras.optimizers, "legacy", None), "Optimizer", None)
    if legacy is not None:
        bases.append(legacy)
    return tuple(bases)


def is_keras_optimizer(optimizer: Any) -> bool:
    """True for a Keras 3 optimizer, or a tf_keras one when tf_keras is installed."""
    base = _keras3_base()
    if base is not None and isinstance(optimizer, base):
        return True
    bases = _tf_keras_bases()
    return bool(bases) and isinstance(optimizer, bases)


def is_distributed(optimizer: Any) -> bool:
    """True when ``optimizer`` already reduces its gradients across ranks."""
    return isinstance(getattr(type(optimizer), "_hora", None), _Settings)


class _LocalVariables:
    """Variables whose gradients stay on this rank (per optimizer object)."""

    _hora: _Settings

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient on this rank: it is not reduced across ranks (Horovod's
        ``register_local_var``)."""
        local = self.__dict__.setdefault("_hora_local_vars", set())
        local.add(id(var))

    def _hora_reduce(self, grads: list, variables: list) -> list:
        return reduce_shared(self._hora.reducer, grads, variables,
                             self.__dict__.get("_hora_local_vars", set()),
                             self._hora.scale_local_gradients)


# ------------------------------------------------------------------------------------ Keras 3


class _Keras3Distributed(_LocalVariables):
    """Mixed in front of a Keras 3 optimizer class: reduce gradients, then apply."""

    @no_autograph
    def build(self, variables: list) -> None:
        """Build the optimizer's variables, plus gradient accumulators when passes > 1."""
        super().build(variables)
        if self._hora.backward_passes_per_step > 1:
            self._hora_accumulators = [
                self.add_variable_from_reference(v, name="hora_accumulator") for v in variables
            ]
            self._hora_passes = self.add_variable(shape=(), initializer="zeros", dtype="int64",
                                                  name="hora_passes")

    @no_autograph
    def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
        """Reduce ``grads`` across ranks (every k-th pass with local aggregation), then update
        the variables as the wrapped optimizer does."""
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)
        if trainable_variables is None:
            if not self.built:
                return super().apply(grads, trainable_variables)
            variables = list(self._trainable_variables)
        else:
            variables = list(trainable_variables)
            if not self.built:
                import keras

                with keras.name_scope(self.name, caller=self):
                    self.build(variables)
                self.built = True
        if self._hora.backward_passes_per_step == 1:
            return super().apply(self._hora_reduce(grads, variables), variables)
        return self._hora_apply_aggregated(grads, variables)

    def _hora_apply_aggregated(self, grads: list, variables: list) -> None:
        parent_apply = super().apply
        passes = self._hora.backward_passes_per_step
        accumulators = [self._hora_accumulators[self._get_variable_index(v)] for v in variables]
        for acc, grad in zip(accumulators, grads):
            if grad is not None:
                acc.assign_add(tf.cast(tf.convert_to_tensor(grad), acc.dtype))
        self._hora_passes.assign_add(1)

        def update() -> tf.Tensor:
            summed = [None if g is None else tf.convert_to_tensor(acc)
                      for g, acc in zip(grads, accumulators)]
            if self._hora.average_aggregated_gradients:
                summed = [None if s is None else s / tf.constant(passes, s.dtype) for s in summed]
            parent_apply(self._hora_reduce(summed, variables), variables)
            for acc in accumulators:
                acc.assign(tf.zeros(acc.shape, acc.dtype))
            self._hora_passes.assign(0)
            return tf.constant(True)

        def skip() -> tf.Tensor:
            self._iterations.assign_add(1)
            return tf.constant(False)

        if tf.executing_eagerly():
            if int(tf.convert_to_tensor(self._hora_passes)) >= passes:
                update()
            else:
                skip()
        else:
            tf.cond(tf.convert_to_tensor(self._hora_passes) >= passes, update, skip)


# ----------------------------------------------------------------------------------- tf_keras


class _TfKerasDistributed(_LocalVariables):
    """Mixed in front of a tf_keras optimizer class: reduce gradients, then apply."""

    @no_autograph
    def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        """Reduce the gradients across ranks, then apply them with the wrapped optimizer."""
        pairs = list(grads_and_vars)
        variables = [v for _, v in pairs]
        grads = self._hora_reduce([g for g, _ in pairs], variables)
        return super().apply_gradients(list(zip(grads, variables)), *args, **kwargs)


# -------------------------------------------------------------------------------------- wrap


def distributed_class(base: type, settings: _Settings) -> type:
    """A subclass of the optimizer class ``base`` that reduces gradients as ``settings`` says.

    The subclass keeps ``base``'s name and module, so saved models name the original class.
    """
    keras3 = _keras3_base()
    if keras3 is not None and issubclass(base, keras3):
        mixin: type = _Keras3Distributed
    else:
        mixin = _TfKerasDistributed
        if settings.backward_passes_per_step != 1:
            raise ValueError("backward_passes_per_step > 1 is supported for Keras 3 optimizers "
                             "only")
    return type(base.__name__, (mixin, base), {
        "_hora": settings,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
    })


def make_settings(prefix: str, compression: type[Compressor] = Compression.none,
                  sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                  op: int = Average, backward_passes_per_step: int = 1,
                  average_aggregated_gradients: bool = False, groups: GroupsArg = None,
                  process_set: ProcessSet = global_process_set, comm_hook: Any = None,
                  scale_local_gradients: bool = True) -> _Settings:
    """Validated settings of a distributed optimizer class.

    Raises:
        ValueError: ``backward_passes_per_step`` < 1 or inconsistent reducer arguments.
    """
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    reducer = GradientReducer(prefix, compression, sparse_as_dense, op,
                              gradient_predivide_factor, groups, process_set, comm_hook)
    return _Settings(reducer, int(backward_passes_per_step), bool(average_aggregated_gradients),
                     bool(scale_local_gradients))


def wrap(optimizer: Any, name: str | None = None,
         compression: type[Compressor] = Compression.none, sparse_as_dense: bool = False,
         gradient_predivide_factor: float = 1.0, op: int = Average,
         backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
         groups: GroupsArg = None, process_set: ProcessSet = global_process_set,
         comm_hook: Any = None, scale_local_gradients: bool = True) -> Any:
    """A new distributed optimizer with ``optimizer``'s configuration (its class, rebuilt from
    ``get_config()``; state of an already built optimizer is not carried over)."""
    if is_distributed(optimizer):
        raise ValueError("the optimizer is already a hora DistributedOptimizer")
    base = type(optimizer)
    prefix = name or f"Distributed{base.__name__}"
    settings = make_settings(prefix, compression, sparse_as_dense, gradient_predivide_factor,
                             op, backward_passes_per_step, average_aggregated_gradients, groups,
                             process_set, comm_hook, scale_local_gradients)
    cls = distributed_class(base, settings)
    return cls.from_config(optimizer.get_config())


def convert_in_place(optimizer: Any, compression: type[Compressor] = Compression.none) -> Any:
    """Turn an existing (possibly built and restored) optimizer into a distributed one by
    switching its class; its variables and state are kept. Returns the optimizer."""
    if is_distributed(optimizer):
        return optimizer
    base = type(optimizer)
    settings = make_settings(f"Distributed{base.__name__}", compression)
    optimizer.__class__ = distributed_class(base, settings)
    return optimizer
