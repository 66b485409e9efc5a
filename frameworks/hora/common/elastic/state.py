"""Elastic training state: what is committed, restored after a failure and synced to new workers.

``commit()`` copies the state to host memory (``save``) and then checks for host updates; after a
failed collective the run loop calls ``restore()`` (back to the last commit); after every
re-formation ``sync()`` broadcasts rank 0's state to every worker. Work done since the last
``commit()`` is what a failure loses.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from hora.common import basics
from hora.common.elastic import worker
from hora.errors import HostsUpdatedInterrupt


class State:
    """Base class of elastic state.

    Args:
        bcast_object: broadcasts a picklable object from rank 0 and returns rank 0's value.
        get_rank: this worker's current rank.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: list[Callable[[], None]]) -> None:
        """Run each of ``callbacks`` after every reset (workers added or removed), e.g. to scale
        the learning rate with the new number of workers."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by the run loop after the job re-formed: ``reset()``, then the callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Save the state to host memory, then raise ``HostsUpdatedInterrupt`` when the job is
        about to change (see ``check_host_updates``). A failure loses only the steps since the
        last commit; commits copy the state, so commit every few steps rather than every one."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raise ``HostsUpdatedInterrupt`` on every rank at once when the driver published a new
        generation of the job (hosts added or removed). Collective: every rank must call it."""
        newest = worker.published_generation() if self._rank() == 0 else -1
        newest = self._bcast_object(newest)
        if newest > worker.current_generation():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self) -> None:
        """Copy the state to host memory."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Go back to the last committed state."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Make every worker's state rank 0's."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Adjust to a re-formed job (before ``sync``); nothing by default."""


class ObjectState(State):
    """State made of plain picklable Python objects, given as keyword arguments and exposed as
    attributes (``state.epoch``, ``state.batch``).

    Args:
        bcast_object: broadcasts a picklable object from rank 0.
        get_rank: this worker's current rank.
        kwargs: the attributes and their initial values.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int],
                 **kwargs: Any) -> None:
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def default_object_state(**kwargs: Any) -> ObjectState:
    """An ``ObjectState`` over the framework-neutral object broadcast."""
    from hora.common.objects import broadcast_object

    return ObjectState(broadcast_object, basics.rank, **kwargs)
