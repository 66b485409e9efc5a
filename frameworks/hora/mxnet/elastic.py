"""Elastic training for MXNet Gluon: ``run`` and ``MXNetState`` (a network's parameters, a
Gluon ``Trainer``'s optimizer states and any other attributes)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import mxnet as mx

from hora.common import basics, objects
from hora.common.elastic import ObjectState, State, run_fn
from hora.mxnet import functions

T = TypeVar("T")


def run(func: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run ``func(state, ...)`` so that it survives lost and added workers (see
    ``hora.torch.elastic.run``)."""
    return run_fn(func)


def _parameters(params: Any) -> dict[str, Any]:
    if isinstance(params, mx.gluon.Block):
        params = params.collect_params()
    if not isinstance(params, (dict, mx.gluon.ParameterDict)):
        raise TypeError("MXNetState takes a Gluon Block or its collect_params(), got "
                         f"{type(params).__name__}")
    return dict(sorted(params.items(), key=lambda item: str(item[0])))


def _updaters(trainer: Any) -> list[Any]:
    # Gluon keeps the optimizer states in its updaters once the trainer is initialised.
    if trainer is None:
        return []
    if not getattr(trainer, "_kv_initialized", True):
        trainer._init_kvstore()  # the updaters exist only after this
    return list(getattr(trainer, "_updaters", []))


def _broadcast_states(obj: Any) -> Any:
    return objects.broadcast_object(obj, root_rank=0, name="elastic.state")


class MXNetState(ObjectState):
    """Elastic state of a Gluon network and trainer.

    Args:
        params: the network (a Gluon Block) or its ``collect_params()``; every parameter must be
            initialised (run one forward pass for deferred shapes).
        trainer: a ``gluon.Trainer`` / ``hvd.DistributedTrainer`` whose optimizer states
            (momentum and the like) are part of the state, or None.
        kwargs: more attributes (epoch, batch, ...), pickled and broadcast.

    Raises:
        TypeError: ``params`` is neither a Block nor a parameter dict.
    """

    def __init__(self, params: Any, trainer: Any = None, **kwargs: Any) -> None:
        self.params = _parameters(params)
        self.trainer = trainer
        self._save_arrays()
        super().__init__(bcast_object=_broadcast_states, get_rank=basics.rank, **kwargs)

    def save(self) -> None:
        self._save_arrays()
        super().save()

    def restore(self) -> None:
        for name, value in self._saved_params.items():
            self.params[name].set_data(mx.nd.array(value, dtype=value.dtype))
        for updater, states in zip(_updaters(self.trainer), self._saved_states):
            updater.set_states(states)
        super().restore()

    def sync(self) -> None:
        functions.broadcast_parameters(self.params, root_rank=0, prefix="elastic")
        updaters = _updaters(self.trainer)
        if updaters:
            states = _broadcast_states([u.get_states(dump_optimizer=False) for u in updaters])
            for updater, value in zip(updaters, states):
                updater.set_states(value)
        self._save_arrays()
        super().sync()

    def _save_arrays(self) -> None:
        self._saved_params = {name: p.data().asnumpy() for name, p in self.params.items()}
        self._saved_states = [u.get_states(dump_optimizer=False)
                              for u in _updaters(self.trainer)]


__all__ = ["MXNetState", "ObjectState", "State", "run"]
