"""Elastic training for TensorFlow 2 (eager execution), with the API of
``horovod.tensorflow.elastic``: ``run``, ``TensorFlowKerasState`` and ``TensorFlowState``.

State is copied to host memory at ``commit()``, written back at ``restore()`` and broadcast from
rank 0 at ``sync()``. TF1-style graphs and sessions are not supported: the states raise
``NotSupportedError`` outside eager execution.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Callable, TypeVar

import tensorflow as tf

from hora import errors
from hora.common import basics
from hora.common.elastic import ObjectState, State, run_fn
from hora.tensorflow import functions

T = TypeVar("T")

_ENGINE_ERRORS = ("HoraError", "TransportError", "HoraTimeoutError", "ShutdownError",
                  "InternalError", "MismatchError")


def _engine_failure(exc: tf.errors.OpError) -> bool:
    """True when a TensorFlow error wraps a failed Hora collective (inside a ``tf.function``,
    Keras ``fit`` among them, the engine's error reaches Python as a TensorFlow error)."""
    return any(name in str(exc.message) for name in _ENGINE_ERRORS)


def run(func: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run ``func(state, ...)`` so that it survives lost and added workers (see
    ``hora.torch.elastic.run``). A TensorFlow error carrying a failed collective counts as
    ``HorovodInternalError``."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> T:
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as exc:
            if _engine_failure(exc):
                raise errors.HoraError(str(exc.message)) from exc
            raise

    return run_fn(wrapper)


def _require_eager(what: str) -> None:
    if not tf.executing_eagerly():
        raise errors.NotSupportedError(f"{what} needs eager execution (TensorFlow 2); TF1-style "
                                       "graphs and sessions are not supported in elastic mode")


def optimizer_variables(optimizer: Any) -> list[Any]:
    """An optimizer's variables: a list property in Keras 3, a method in older Keras."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _snapshot(variables: Sequence[Any]) -> list[Any]:
    return [tf.identity(v).numpy() for v in variables]


def _assign(variables: Sequence[Any], values: Sequence[Any]) -> None:
    for variable, value in zip(variables, values):
        variable.assign(value)


def _broadcast_state(obj: Any) -> Any:
    return functions.broadcast_object(obj, root_rank=0, name="elastic.state")


class TensorFlowKerasState(ObjectState):
    """Elastic state of a Keras model and its optimizer (eager execution).

    Args:
        model: a built Keras model.
        optimizer: its optimizer (default ``model.optimizer``).
        backend: accepted for compatibility (TF1 sessions); unused.
        kwargs: more attributes (epoch, batch, ...), pickled and broadcast.

    Raises:
        ValueError: the model is not built.
        NotSupportedError: not executing eagerly.
    """

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any) -> None:
        _require_eager("TensorFlowKerasState")
        if hasattr(model, "built") and not model.built:
            raise ValueError("the model must be built first: call model.build(input_shape)")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        self.backend = backend
        self._save_model()
        super().__init__(bcast_object=_broadcast_state, get_rank=basics.rank, **kwargs)

    def _optimizer_variables(self) -> list[Any]:
        if self.optimizer is None:
            return []
        if getattr(self.optimizer, "built", True) is False:
            # a fresh worker's optimizer has no slots yet: build them so every rank has the same
            self.optimizer.build(self.model.trainable_variables)
        return optimizer_variables(self.optimizer)

    def save(self) -> None:
        self._save_model()
        super().save()

    def restore(self) -> None:
        _assign(self.model.variables, self._saved_model)
        _assign(self._optimizer_variables(), self._saved_optimizer)
        super().restore()

    def sync(self) -> None:
        functions.broadcast_variables(list(self.model.variables) + self._optimizer_variables(),
                                      root_rank=0)
        self._save_model()
        super().sync()

    def _save_model(self) -> None:
        self._saved_model = _snapshot(self.model.variables)
        self._saved_optimizer = _snapshot(self._optimizer_variables())


class TensorFlowState(ObjectState):
    """Elastic state of a list of TensorFlow variables (eager execution).

    Args:
        variables: the ``tf.Variable`` objects to track.
        session: accepted for compatibility (TF1); must be None.
        kwargs: more attributes, pickled and broadcast.

    Raises:
        ValueError: no variables given.
        NotSupportedError: not executing eagerly, or a session given.
    """

    def __init__(self, variables: Sequence[Any] | None = None, session: Any = None,
                 **kwargs: Any) -> None:
        _require_eager("TensorFlowState")
        if session is not None:
            raise errors.NotSupportedError("TensorFlowState takes no session: TF1-style sessions "
                                           "are not supported in elastic mode")
        if not variables:
            raise ValueError("TensorFlowState needs the list of variables to track")
        self.variables = list(variables)
        self._saved_values = _snapshot(self.variables)
        super().__init__(bcast_object=_broadcast_state, get_rank=basics.rank, **kwargs)

    def save(self) -> None:
        self._saved_values = _snapshot(self.variables)
        super().save()

    def restore(self) -> None:
        _assign(self.variables, self._saved_values)
        super().restore()

    def sync(self) -> None:
        functions.broadcast_variables(self.variables, root_rank=0)
        self._saved_values = _snapshot(self.variables)
        super().sync()


__all__ = ["ObjectState", "State", "TensorFlowKerasState", "TensorFlowState", "run"]
