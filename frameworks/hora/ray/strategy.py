"""Where a :class:`~hora.ray.RayExecutor` job's workers go: Ray placement groups.

``PGStrategy`` packs ``num_workers`` one-worker bundles (or uses the placement group the caller
already runs in); ``ColocatedStrategy`` puts ``num_workers_per_host`` workers on each of
``num_hosts`` distinct nodes (``STRICT_SPREAD`` bundles, one per node). Both return the actors
in creation order; the executor orders ranks by node afterwards.
"""

from __future__ import annotations

import logging
from typing import Any

from hora.ray.worker import BaseHorovodWorker

_log = logging.getLogger("hora")


def create_placement_group(resources_per_bundle: dict[str, float], num_bundles: int,
                           pg_timeout: float, pg_strategy: str) -> tuple[Any, list[dict]]:
    """A ready placement group of ``num_bundles`` copies of ``resources_per_bundle``, and its
    bundles.

    Raises:
        TimeoutError: the cluster could not place it within ``pg_timeout`` seconds (the message
            gives what was asked and what the cluster has free); the group is removed.
    """
    import ray

    bundles = [dict(resources_per_bundle) for _ in range(num_bundles)]
    group = ray.util.placement_group(bundles, strategy=pg_strategy)
    ready, _ = ray.wait([group.ready()], timeout=pg_timeout)
    if not ready:
        ray.util.remove_placement_group(group)
        raise TimeoutError(
            f"hora.ray: could not place {num_bundles} x {resources_per_bundle} "
            f"({pg_strategy}) within {pg_timeout:g} s; the cluster has "
            f"{ray.available_resources()} free. Ask for fewer workers or resources, add nodes, "
            "or raise placement_group_timeout_s in RayExecutor.create_settings")
    return group, bundles


def _resources(cpus: float, gpus: float) -> dict[str, float]:
    return {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}


class BaseStrategy:
    """Creates the workers of a job and removes what it made."""

    placement_group: Any = None
    workers: list[Any]

    def __init__(self, *, settings: Any, cpus_per_worker: float, use_gpu: bool,
                 gpus_per_worker: float | None) -> None:
        self.settings = settings
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = gpus_per_worker or 1
        self.workers = []

    @property
    def num_workers(self) -> int:
        """How many workers the strategy creates."""
        raise NotImplementedError

    def _worker(self, rank: int, bundle_index: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        where = PlacementGroupSchedulingStrategy(
            placement_group=self.placement_group, placement_group_bundle_index=bundle_index,
            placement_group_capture_child_tasks=False)
        return ray.remote(BaseHorovodWorker).options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker * int(self.use_gpu),
            scheduling_strategy=where,
        ).remote(world_rank=rank, world_size=self.num_workers)

    def create_workers(self) -> tuple[list[Any], list[Any]]:
        """The workers, and one worker per node."""
        raise NotImplementedError

    def _share_gpus(self) -> None:
        """Every worker of a node sees all the GPUs given to the node's workers (so that they
        can reach each other's devices)."""
        import ray

        if not self.use_gpu:
            return
        nodes = ray.get([w.node_id.remote() for w in self.workers])
        gpus = ray.get([w.get_gpu_ids.remote() for w in self.workers])
        by_node: dict[str, list[int]] = {}
        for node, ids in zip(nodes, gpus):
            by_node.setdefault(node, []).extend(ids)
        ray.get([w.update_env_vars.remote(
            {"CUDA_VISIBLE_DEVICES": ",".join(map(str, sorted(by_node[node])))})
            for w, node in zip(self.workers, nodes)])

    def one_per_node(self) -> list[Any]:
        """One worker of each node."""
        import ray

        nodes = ray.get([w.node_id.remote() for w in self.workers])
        return list({node: w for node, w in zip(nodes, self.workers)}.values())

    def shutdown(self) -> None:
        """Remove the placement group this strategy made."""
        import ray

        if self.placement_group is not None:
            ray.util.remove_placement_group(self.placement_group)
        self.placement_group = None
        self.workers = []


class ColocatedStrategy(BaseStrategy):
    """``num_workers_per_host`` workers on each of ``num_hosts`` distinct nodes."""

    def __init__(self, *, settings: Any, num_hosts: int, num_workers_per_host: int,
                 use_gpu: bool, cpus_per_worker: float, gpus_per_worker: float | None) -> None:
        super().__init__(settings=settings, cpus_per_worker=cpus_per_worker, use_gpu=use_gpu,
                         gpus_per_worker=gpus_per_worker)
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host

    @property
    def num_workers(self) -> int:
        return int(self.num_hosts * self.num_workers_per_host)

    def create_workers(self) -> tuple[list[Any], list[Any]]:
        per_host = self.num_workers_per_host
        self.placement_group, bundles = create_placement_group(
            _resources(self.cpus_per_worker * per_host,
                       self.gpus_per_worker * per_host * int(self.use_gpu)),
            self.num_hosts, self.settings.placement_group_timeout_s, "STRICT_SPREAD")
        self.workers = [self._worker(host * per_host + i, host)
                        for host in range(len(bundles)) for i in range(per_host)]
        self._share_gpus()
        return self.workers, self.one_per_node()


class PGStrategy(BaseStrategy):
    """``num_workers`` one-worker bundles packed onto as few nodes as fit (or the placement
    group the caller runs in, unless ``force_create_placement_group``)."""

    def __init__(self, *, settings: Any, num_workers: int, use_gpu: bool,
                 cpus_per_worker: float, gpus_per_worker: float | None,
                 placement_group: Any = None, force_create_placement_group: bool = False) -> None:
        from ray.util.placement_group import get_current_placement_group

        super().__init__(settings=settings, cpus_per_worker=cpus_per_worker, use_gpu=use_gpu,
                         gpus_per_worker=gpus_per_worker)
        self._num_workers = num_workers
        if not force_create_placement_group:
            self.placement_group = placement_group or get_current_placement_group()
        self._created_placement_group = False

    @property
    def num_workers(self) -> int:
        return int(self._num_workers)

    def create_workers(self) -> tuple[list[Any], list[Any]]:
        if self.placement_group is None:
            self.placement_group, _ = create_placement_group(
                _resources(self.cpus_per_worker, self.gpus_per_worker * int(self.use_gpu)),
                self.num_workers, self.settings.placement_group_timeout_s, "PACK")
            self._created_placement_group = True
        else:
            _log.info("hora.ray: the workers join the current placement group "
                      "(use_current_placement_group=False makes a new one)")
        self.workers = [self._worker(i, i if self._created_placement_group else -1)
                        for i in range(self.num_workers)]
        self._share_gpus()
        return self.workers, self.one_per_node()

    def shutdown(self) -> None:
        if not self._created_placement_group:
            self.placement_group = None  # the caller's: not ours to remove
        super().shutdown()
