"""``TorchState``: elastic state of a PyTorch training loop (models, optimizers, samplers and any
other attributes)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from hora.common import basics
from hora.common.elastic.state import ObjectState
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class _Handler:
    """Saves, restores and syncs one attribute whose type needs more than pickling."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self._saved = self._snapshot()

    def _snapshot(self) -> Any:
        return copy.deepcopy(self.value.state_dict())

    def save(self) -> None:
        self._saved = self._snapshot()

    def restore(self) -> None:
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self) -> None:
        raise NotImplementedError()

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0,
                                                    name="elastic.sampler"))


_HANDLERS: list[tuple[type, type[_Handler]]] = [
    (torch.nn.Module, _ModelHandler),
    (torch.optim.Optimizer, _OptimizerHandler),
    (ElasticSampler, _SamplerHandler),
]


def _handler_for(value: Any) -> _Handler | None:
    for kind, handler in _HANDLERS:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """Elastic state of a PyTorch training process.

    ``model`` and ``optimizer`` (and any keyword argument that is a ``torch.nn.Module``,
    ``torch.optim.Optimizer`` or ``ElasticSampler``) are saved through their ``state_dict`` and
    synced with ``broadcast_parameters`` / ``broadcast_optimizer_state``; every other keyword
    argument is a plain attribute, pickled and broadcast. All are attributes of the state.

    Args:
        model: the model, or None.
        optimizer: the optimizer, or None.
        kwargs: more attributes (epoch, batch, samplers, further models...).
    """

    _handlers: dict[str, _Handler]

    def __init__(self, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, **kwargs: Any) -> None:
        kwargs.update(model=model, optimizer=optimizer)
        handlers: dict[str, _Handler] = {}
        plain: dict[str, Any] = {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=_broadcast_state, get_rank=basics.rank, **plain)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name: str, value: Any) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)  # a new model or optimizer is committed at once
        super().__setattr__(name, value)


def _broadcast_state(obj: Any) -> Any:
    return broadcast_object(obj, root_rank=0, name="elastic.state")
