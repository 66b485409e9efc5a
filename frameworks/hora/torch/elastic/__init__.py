"""Elastic training for PyTorch, with the API of ``horovod.torch.elastic``::

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)

Start the job with ``horarun --min-np 2 --host-discovery-script ./hosts.sh python train.py``.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from hora.common.elastic import ObjectState, State, run_fn
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.elastic.state import TorchState

T = TypeVar("T")


def run(func: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run ``func(state, ...)`` so that it survives lost and added workers.

    Before each attempt the state is synced from rank 0; a failed collective restores the last
    commit, re-forms the job and runs ``func`` again; so does a ``HostsUpdatedInterrupt`` (without
    the restore). ``func`` itself must not start with a collective other than through ``state``:
    new workers sync first.
    """
    return run_fn(func)


__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]
