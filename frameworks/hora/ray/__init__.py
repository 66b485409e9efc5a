"""Hora on Ray: Horovod's ``horovod.ray`` API, and a Ray Train backend.

- :class:`RayExecutor`: start a job of Ray actors and run functions on every rank
  (``RayExecutor(settings, num_workers=4)``, ``start()``, ``run(fn)``, ``shutdown()``); with
  ``min_workers``/``max_workers`` an elastic job whose workers come and go with Ray's nodes.
- :class:`HoraConfig`: a ``ray.train`` backend, ``DataParallelTrainer(train_fn,
  backend_config=HoraConfig(), scaling_config=...)``; :class:`HoraTrainer` is that trainer
  (Ray Train's ``HorovodTrainer`` for Hora).

``import hora.ray`` imports Ray, but Ray Train only when ``HoraConfig`` or ``HoraTrainer`` is
used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hora.ray.runner import RayExecutor

if TYPE_CHECKING:  # imported on first use (below): Ray Train costs 0.8 s to import
    from hora.ray.train import HoraConfig, HoraTrainer

__all__ = ["HoraConfig", "HoraTrainer", "RayExecutor"]


def __getattr__(name: str) -> Any:
    if name in ("HoraConfig", "HoraTrainer"):
        from hora.ray import train

        return getattr(train, name)
    raise AttributeError(f"module 'hora.ray' has no attribute {name!r}")
