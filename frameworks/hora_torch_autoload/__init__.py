"""Makes ``backend="hora"`` known to torch.distributed in every process that imports torch.

torch calls ``register()`` while ``import torch`` runs, for each entry point of the
``torch.backends`` group (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off; ``import hora.torch``
then registers). This module stays outside the ``hora`` package so that it imports nothing of
Hora: the engine, the frontends and their imports wait until a process group with this backend is
created. Whatever goes wrong here is reported as a warning, never raised: a broken Hora must not
break ``import torch``.

Besides the backend, ``register()`` lets ``torch.distributed.monitored_barrier`` run on ``hora``
groups: torch lets only gloo groups run it, so the function is wrapped, and calls on other
backends' groups go to torch's own unchanged.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

BACKEND_NAME = "hora"


def _create(opts: Any, pg_options: Any = None) -> Any:
    """torch's creator for a ``hora`` group: Hora's own, imported now."""
    from hora.torch import distributed_backend

    return distributed_backend.create_group(opts, pg_options)


def _monitored_barrier_for_hora(original: Any) -> Any:
    """``original`` (torch's monitored_barrier), except on ``hora`` groups, where the group's own
    ``monitored_barrier`` runs (with torch's checks of membership and default timeout)."""
    import torch.distributed.distributed_c10d as c10d

    @functools.wraps(original)
    def monitored_barrier(group: Any = None, timeout: Any = None,
                          wait_all_ranks: bool = False) -> Any:
        if c10d._rank_not_in_group(group) or c10d.get_backend(group) != BACKEND_NAME:
            return original(group, timeout, wait_all_ranks)
        pg: Any = c10d._get_default_group() if group is None else group
        if timeout is None:
            timeout = c10d._get_default_timeout(c10d.Backend(BACKEND_NAME))
        return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__hora_wrapped__ = original  # type: ignore[attr-defined]
    return monitored_barrier


def _let_monitored_barrier_run_on_hora() -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    if hasattr(c10d.monitored_barrier, "__hora_wrapped__"):
        return
    wrapped = _monitored_barrier_for_hora(c10d.monitored_barrier)
    c10d.monitored_barrier = wrapped
    dist.monitored_barrier = wrapped


def register() -> None:
    """Register the ``hora`` backend with torch.distributed (CPU tensors), if it is not yet."""
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return
        if BACKEND_NAME.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                          devices=["cpu"])
        _let_monitored_barrier_run_on_hora()
    except Exception as exc:  # noqa: BLE001 (import torch must go on)
        warnings.warn(f"hora: could not register the 'hora' torch.distributed backend ({exc!r}); "
                      "import hora.torch to register it, or reinstall hora", stacklevel=2)
