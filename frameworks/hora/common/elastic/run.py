"""The retry loop of ``hvd.elastic.run``: sync, train, and on a lost rank or a host update,
restore (after a failure), re-form the job and go again."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, TypeVar

from hora.common.elastic import worker
from hora.common.elastic.state import State
from hora.errors import HoraError, HostsUpdatedInterrupt

_log = logging.getLogger("hora.elastic")

T = TypeVar("T")


def reform_job() -> None:
    """Leave the job and join the driver's next generation of it: ``shutdown()`` then
    ``init()`` (what every frontend's ``run`` does between attempts)."""
    from hora.common import basics  # basics imports this package: import at call time

    basics.shutdown()
    basics.init()


def run_fn(func: Callable[..., T], reset: Callable[[], None] = reform_job) -> Callable[..., T]:
    """Wrap ``func(state, *args, **kwargs)`` so that it survives re-formations of the job.

    Before each attempt every worker gets rank 0's state (``state.sync()``). A collective that
    fails because a rank was lost (``HorovodInternalError``) makes this worker ``restore()`` its
    last commit; a ``HostsUpdatedInterrupt`` keeps the state as it is. Either way ``reset()``
    re-forms the job (shutdown and init into the driver's next generation) and
    ``state.on_reset()`` runs before the next attempt. The number of re-formations is bounded by
    the driver (``--reset-limit``) and every wait by ``HORA_ELASTIC_TIMEOUT``.
    """

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> T:
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as exc:
                skip_sync = exc.skip_sync
                _log.info("hora elastic: hosts updated; re-forming the job")
            except HoraError as exc:
                _log.warning("hora elastic: collective failed (%s); restoring the last commit "
                             "and re-forming the job", exc)
                state.restore()
                skip_sync = False
                worker.request_reset()
            reset()
            state.on_reset()

    return wrapper
