"""Hora as a Ray Train backend: ``HoraConfig`` and ``HoraTrainer``.

``DataParallelTrainer(train_fn, backend_config=HoraConfig(), scaling_config=ScalingConfig(
num_workers=N))`` (or ``HoraTrainer(train_fn, scaling_config=...)``, Ray Train's
``HorovodTrainer`` for Hora) runs a Horovod-style loop: ``hvd.init()`` inside ``train_fn``
takes no arguments. Before the loop starts, the backend gives every worker its rank (Ray Train's
world rank), its host coordinates (hosts are Ray nodes), the address of a rendezvous store that
the backend serves from Ray Train's controller, and a fresh job secret, all through Ray Train's
worker group. When the run ends or Ray Train restarts the workers (a failure), Hora is shut down
on each worker and the store is stopped; a restarted group gets a new store and secret.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from typing import Any

import ray
from ray.train.backend import Backend, BackendConfig
from ray.train.v2._internal.constants import is_v2_enabled

if is_v2_enabled():  # the trainer Ray Train gives users, as ray.train.torch.TorchTrainer does
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
else:
    from ray.train.data_parallel_trainer import DataParallelTrainer  # type: ignore[assignment]

from hora.ray.runner import nics_env, store_address
from hora.runner.env import topology_env
from hora.runner.slots import SlotInfo, local_and_cross


@dataclasses.dataclass
class HoraConfig(BackendConfig):
    """How Ray Train sets Hora up on its workers.

    Args:
        nics: the network interface the ranks listen on (one name; default: the one that
            routes to the store).
        timeout_s: how long the ranks wait for each other in ``hvd.init()``
            (``HORA_START_TIMEOUT``).
        verbose: accepted for Ray's ``HorovodConfig`` scripts (Hora logs with
            ``HORA_LOG_LEVEL``).
    """

    nics: set[str] | None = None
    timeout_s: int = 300
    verbose: int = 1

    @property
    def backend_cls(self) -> type:
        return _HoraBackend


def _where() -> tuple[str, str]:
    return str(ray.get_runtime_context().get_node_id()), ray.util.get_node_ip_address()


def _set_env(env: dict[str, str]) -> None:
    os.environ.update(env)


def _stop_hora() -> None:
    import hora

    if hora.is_initialized():
        hora.shutdown()


class _HoraBackend(Backend):
    """Serves the job's store while the worker group lives; sets each worker's variables."""

    def __init__(self) -> None:
        self._store: Any = None

    def on_start(self, worker_group: Any, backend_config: HoraConfig) -> None:
        from hora import _core

        self._stop_store()
        places = worker_group.execute(_where)
        nodes = [node for node, _ in places]
        # Ray Train numbers its workers node by node; Hora's host groups rely on that.
        if any(node in nodes[:i] and nodes[i - 1] != node for i, node in enumerate(nodes)):
            raise RuntimeError(f"hora.ray: Ray Train's workers are not numbered node by node "
                               f"(nodes by rank: {nodes}); Hora needs each node's ranks "
                               "consecutive")
        address = store_address(nodes)
        secret = secrets.token_hex(32)
        self._store = _core.StoreServer(address, 0, secret)
        common = {"HORA_RENDEZVOUS_ADDR": address, "HORA_RENDEZVOUS_PORT": str(self._store.port),
                  "HORA_SECRET": secret, "HORA_START_TIMEOUT": str(backend_config.timeout_s)}
        common.update(nics_env(backend_config.nics))
        size = len(nodes)
        calls = []
        for rank, (node, coordinates) in enumerate(zip(nodes, local_and_cross(nodes))):
            env = {**common, **topology_env(SlotInfo(node, rank, size, *coordinates))}
            calls.append(worker_group.execute_single_async(rank, _set_env, env))
        ray.get(calls)

    def on_shutdown(self, worker_group: Any, backend_config: HoraConfig) -> None:
        try:
            worker_group.execute(_stop_hora)
        finally:
            self._stop_store()

    def _stop_store(self) -> None:
        if self._store is not None:
            self._store.stop()
            self._store = None


class HoraTrainer(DataParallelTrainer):  # type: ignore[misc]
    """A Ray Train trainer whose workers run Hora (Ray Train's ``HorovodTrainer`` for Hora):
    ``HoraTrainer(train_loop_per_worker, train_loop_config=..., hora_config=HoraConfig(),
    scaling_config=ScalingConfig(num_workers=N), run_config=..., datasets=...)``.
    ``horovod_config`` is accepted as another name of ``hora_config``."""

    def __init__(self, train_loop_per_worker: Any, *, hora_config: HoraConfig | None = None,
                 horovod_config: HoraConfig | None = None, **kwargs: Any) -> None:
        super().__init__(train_loop_per_worker,
                         backend_config=hora_config or horovod_config or HoraConfig(), **kwargs)
