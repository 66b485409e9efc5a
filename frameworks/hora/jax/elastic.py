"""Elastic training for JAX: ``run`` and ``JaxState`` (parameters, optax state and any other
attributes, all plain pytrees)."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import jax

from hora.common import basics, objects
from hora.common.elastic import ObjectState, State, run_fn
from hora.common.elastic.run import reform_job
from hora.jax import _ffi

__all__ = ["JaxState", "ObjectState", "State", "run"]

T = TypeVar("T")


def run(func: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run ``func(state, ...)`` so that it survives lost and added workers (see
    ``hora.torch.elastic.run``).

    A collective that fails inside a jitted function reaches Python as XLA's
    ``JaxRuntimeError``; it counts as the Hora error it carries. After each re-formation the
    compiled programs are dropped (``jax.clear_caches()``): they hold the old job's size and
    rank in their shapes.
    """
    return run_fn(raising_engine_errors(func), reset=_reform_and_recompile)


def raising_engine_errors(func: Callable[..., T]) -> Callable[..., T]:
    """``func`` raising the Hora error inside a ``JaxRuntimeError`` as that error."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except jax.errors.JaxRuntimeError as exc:
            error = _ffi.reraise(exc)
            if error is exc:
                raise
            raise error from exc

    return wrapper


def _reform_and_recompile() -> None:
    reform_job()
    jax.clear_caches()


def _broadcast_state(obj: Any) -> Any:
    return objects.broadcast_object(obj, root_rank=0, name="elastic.state")


class JaxState(ObjectState):
    """Elastic state of a JAX training loop, exposed as attributes (``state.params``,
    ``state.opt_state``, ``state.epoch``).

    JAX values are immutable pytrees, so the generic object state serves as it is: ``commit``
    keeps a copy, ``restore`` puts it back, ``sync`` gives every rank rank 0's values (pickled,
    as one object).

    Args:
        params: the parameter pytree.
        opt_state: the optax state (from ``opt.init(params)``), or None.
        kwargs: more attributes (epoch, batch, ...), pickled and broadcast.

    Raises:
        HoraError: from ``sync`` when the broadcast fails.
    """

    def __init__(self, params: Any, opt_state: Any = None, **kwargs: Any) -> None:
        super().__init__(bcast_object=_broadcast_state, get_rank=basics.rank, params=params,
                         opt_state=opt_state, **kwargs)
