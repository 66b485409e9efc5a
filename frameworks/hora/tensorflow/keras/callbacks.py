"""Keras 3 callbacks for distributed training with ``model.fit``.

- ``BroadcastGlobalVariablesCallback(root_rank)``: start every rank from the root's model and
  optimizer state.
- ``MetricAverageCallback()``: average the epoch's metrics across ranks (place it before
  callbacks that read them, such as checkpointing or ReduceLROnPlateau).
- ``LearningRateWarmupCallback(initial_lr, warmup_epochs=5, ...)``: ramp the learning rate from
  ``initial_lr / size`` to ``initial_lr`` (Goyal et al., "Accurate, Large Minibatch SGD").
- ``LearningRateScheduleCallback(initial_lr, multiplier, ...)``: ``initial_lr * multiplier(epoch)``
  within an epoch range, per epoch (staircase) or per batch.

The learning-rate callbacks need an optimizer with a settable learning rate (a number, not a
``LearningRateSchedule``). Momentum correction scales the optimizer's momentum buffers
(``optimizer.momentums``, as Keras's SGD has) by ``new_lr / old_lr`` whenever the rate changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Union

import keras
import numpy as np
import tensorflow as tf

from hora.common import basics
from hora.common import collectives as _collectives
from hora.common.ops import Average
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow.functions import broadcast_variables

__all__ = [
    "BroadcastGlobalVariablesCallback",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "MetricAverageCallback",
]

Multiplier = Union[float, Callable[[float], float]]


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast the model's variables and the optimizer's variables from ``root_rank`` when
    training starts (once per callback object), so every rank starts from the same state.

    Args:
        root_rank: global rank whose values every rank takes.
        device: accepted for compatibility.
        local_variables: a variable or a collection of variables of the model that keep each
            rank's own values (not broadcast).
        process_set: the ranks that take part.

    Raises:
        ValueError: a local variable that is not a variable.
    """

    def __init__(self, root_rank: int = 0, device: str = "", local_variables: Any = None,
                 process_set: ProcessSet = global_process_set) -> None:
        super().__init__()
        del device
        self.root_rank = root_rank
        self.process_set = process_set
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif _is_variable(local_variables):
            local_variables = [local_variables]
        elif not all(_is_variable(v) for v in local_variables):
            raise ValueError("All local variables must be of tf.Variable type.")
        self._local_vars = {id(v) for v in local_variables}

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s value on every rank: it is not broadcast."""
        self._local_vars.add(id(var))

    def _variables(self) -> list:
        variables = [v for v in self.model.variables if id(v) not in self._local_vars]
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and getattr(optimizer, "built", True):
            variables += list(optimizer.variables)
        return variables

    def _broadcast(self) -> None:
        variables = self._variables()
        if not variables:
            return
        broadcast_variables(variables, self.root_rank, process_set=self.process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Broadcast when the model and optimizer are built (Keras 3 builds them before)."""
        if not self.broadcast_done and getattr(self.model, "built", False):
            self._broadcast()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Broadcast after the first batch if the model was not built when training began."""
        if not self.broadcast_done:
            self._broadcast()


def _is_variable(value: Any) -> bool:
    """A TensorFlow or Keras 3 variable (Keras 3's is not a ``tf.Variable``)."""
    return isinstance(value, (tf.Variable, keras.Variable))


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float, np.number)):
        return True
    return isinstance(value, (np.ndarray, tf.Tensor)) and np.ndim(value) == 0


class MetricAverageCallback(keras.callbacks.Callback):
    """Replace every numeric metric of an epoch's logs by its average over the ranks (one
    grouped allreduce per epoch, metrics in sorted order).

    Args:
        device: accepted for compatibility.
        process_set: the ranks that take part.
    """

    def __init__(self, device: str = "", process_set: ProcessSet = global_process_set) -> None:
        super().__init__()
        del device
        self.process_set = process_set

    def _average(self, logs: dict | None) -> None:
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if _is_number(v))
        if not keys:
            return
        values = [np.array([float(np.asarray(logs[k]))], dtype=np.float64) for k in keys]
        averaged = _collectives.grouped_allreduce(values, name="MetricAverageCallback",
                                                  op=Average, process_set=self.process_set)
        for key, value in zip(keys, averaged):
            logs[key] = float(value[0])

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Average the epoch's metrics in place."""
        self._average(logs)


def _get_lr(optimizer: Any) -> float:
    return float(np.asarray(tf.convert_to_tensor(optimizer.learning_rate)))


def _set_lr(optimizer: Any, value: float) -> None:
    try:
        optimizer.learning_rate = value
    except TypeError as exc:
        raise ValueError(
            "the learning-rate callbacks need an optimizer created with a numeric learning "
            "rate, not a LearningRateSchedule"
        ) from exc


def _momentum_buffers(optimizer: Any) -> list:
    if not float(getattr(optimizer, "momentum", 0.0) or 0.0):
        return []
    return [m for m in getattr(optimizer, "momentums", None) or [] if m is not None]


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` for epochs in
    ``[start_epoch, end_epoch)``.

    Args:
        initial_lr: the base learning rate (usually the single-rank rate times ``size()``).
        multiplier: a constant or a function of the (fractional) epoch.
        start_epoch: first epoch the schedule applies to.
        end_epoch: first epoch it no longer applies to (None: no end).
        staircase: adjust once at the start of each epoch; otherwise at every batch with the
            fractional epoch ``epoch + batch / steps_per_epoch``.
        momentum_correction: scale momentum buffers by ``new_lr / old_lr`` on each change.
        steps_per_epoch: batches per epoch (default: what ``model.fit`` reports).
        verbose: print each change when > 0.
    """

    def __init__(self, initial_lr: float, multiplier: Multiplier, start_epoch: int = 0,
                 end_epoch: int | None = None, staircase: bool = True,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0) -> None:
        super().__init__()
        if initial_lr is None:
            raise ValueError("initial_lr is required (the base learning rate of the schedule)")
        self.initial_lr = float(initial_lr)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch: int | None = None
        if callable(multiplier):
            self.multiplier: Callable[[float], float] = multiplier
        else:
            constant = float(multiplier)
            self.multiplier = lambda epoch: constant

    def _in_range(self, epoch: int) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch: float) -> None:
        optimizer = self.model.optimizer
        old_lr = _get_lr(optimizer)
        new_lr = self.initial_lr * float(self.multiplier(epoch))
        if new_lr == old_lr:
            return
        _set_lr(optimizer, new_lr)
        if self.momentum_correction and old_lr > 0.0:
            ratio = new_lr / old_lr
            for buffer in _momentum_buffers(optimizer):
                buffer.assign(buffer * tf.constant(ratio, buffer.dtype))
        if self.verbose > 0:
            print(f"Epoch {epoch:.3f}: learning rate set to {new_lr:g}.")

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Take ``steps_per_epoch`` from ``model.fit`` when it was not given."""
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Remember the epoch (the rate changes at its first batch)."""
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Adjust the learning rate for this batch."""
        epoch = self.current_epoch
        if epoch is None or not self._in_range(epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust(epoch)
            return
        if not self.steps_per_epoch:
            raise ValueError("steps_per_epoch is needed when staircase=False and model.fit "
                             "does not know the number of batches per epoch")
        self._adjust(epoch + batch / float(self.steps_per_epoch))

    def on_epoch_end(self, epoch: int, logs: Mapping | None = None) -> None:
        """Report the current learning rate as ``lr`` in the logs."""
        if isinstance(logs, dict):
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate linearly, batch by batch, from ``initial_lr / size()`` to
    ``initial_lr`` over ``warmup_epochs`` epochs; at the end of the warmup it is exactly
    ``initial_lr``.

    Args:
        initial_lr: the rate reached after the warmup (usually the single-rank rate times
            ``size()``).
        warmup_epochs: length of the warmup.
        momentum_correction: scale momentum buffers by ``new_lr / old_lr`` on each change.
        steps_per_epoch: batches per epoch (default: what ``model.fit`` reports).
        verbose: print when the warmup ends when > 0.
    """

    def __init__(self, initial_lr: float, warmup_epochs: int = 5,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0) -> None:
        self.warmup_epochs = warmup_epochs

        def multiplier(epoch: float) -> float:
            n = basics.size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1.0)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=0)
        self.warmup_verbose = verbose

    def on_epoch_end(self, epoch: int, logs: Mapping | None = None) -> None:
        """Finish the warmup at ``initial_lr`` after its last epoch."""
        if epoch == self.warmup_epochs - 1:
            self._adjust(float(self.warmup_epochs))
            if self.warmup_verbose > 0:
                print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                      f"{_get_lr(self.model.optimizer):g}.")
        super().on_epoch_end(epoch, logs)
