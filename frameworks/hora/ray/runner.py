"""``RayExecutor``: a Hora job whose ranks are Ray actors (Horovod's ``horovod.ray`` API).

The executor places the workers with a placement group (``strategy``), learns each worker's
node, orders the ranks so that each node's ranks are consecutive, and serves the rendezvous
store itself (in the driver, or in an actor of the cluster under Ray Client). Every worker gets
its coordinates, the store's address and a fresh job secret through Ray calls, never through
ssh or files; ``hvd.init()`` in a function the executor runs then needs no arguments.

A function that raises on one worker ends the job: the executor stops every worker and raises
that worker's error (its traceback included), instead of leaving the other ranks waiting in a
collective.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hora.ray.strategy import BaseStrategy, ColocatedStrategy, PGStrategy

_log = logging.getLogger("hora")


@dataclasses.dataclass
class MiniSettings:
    """What the executor needs to set a job up (Horovod's ``horovod.ray.runner.MiniSettings``).

    ``key`` is the job secret (a fresh random one per settings object); ``timeout_s`` bounds the
    ranks' rendezvous (``HORA_START_TIMEOUT``); ``placement_group_timeout_s`` bounds the wait for
    Ray to place the workers; ``nics``: the network interface the ranks listen on (one name).
    """

    nics: set[str] | None = None
    verbose: int = 1
    key: str = dataclasses.field(default_factory=lambda: secrets.token_hex(32))
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    timeout_s: int = 300
    placement_group_timeout_s: int = 100
    elastic: bool = False


def _coordinates_env(rank: int, size: int, local_rank: int, local_size: int, cross_rank: int,
                     cross_size: int, host: str | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {"RANK": rank, "SIZE": size, "LOCAL_RANK": local_rank,
                              "LOCAL_SIZE": local_size, "CROSS_RANK": cross_rank,
                              "CROSS_SIZE": cross_size}
    if host is not None:
        values["HOSTNAME"] = host
    return {prefix + name: value for prefix in ("HORA_", "HOROVOD_")
            for name, value in values.items()}


def nics_env(nics: set[str] | Sequence[str] | None) -> dict[str, str]:
    """``HORA_IFACE`` for the interface ``nics`` names (Hora listens on one interface).

    Raises:
        ValueError: more than one interface.
    """
    names = sorted(nics or ())
    if len(names) > 1:
        raise ValueError(f"hora.ray: nics={names}: Hora's ranks listen on one interface; "
                         "give one name")
    return {"HORA_IFACE": names[0]} if names else {}


def store_address(nodes: Iterable[str]) -> str:
    """Where a store served from this process is reached by workers on ``nodes`` (Ray node
    ids): 127.0.0.1 when every one is this process's node, else this node's address."""
    import ray

    here = str(ray.get_runtime_context().get_node_id())
    return "127.0.0.1" if set(nodes) <= {here} else ray.util.get_node_ip_address()


class Coordinator:
    """Ranks by node, their coordinates, and the job's rendezvous store
    (Horovod's ``horovod.ray.runner.Coordinator``)."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.node_id_by_rank: dict[str, list[int]] = {}
        self._hostnames: set[str] = set()
        self._store: Any = None

    @property
    def world_size(self) -> int:
        """How many ranks registered."""
        return sum(len(ranks) for ranks in self.node_id_by_rank.values())

    @property
    def hostnames(self) -> set[str]:
        """The host names of the registered ranks."""
        return self._hostnames

    @property
    def node_id_string(self) -> str:
        """``node:ranks,node:ranks`` in registration order."""
        return ",".join(f"{node}:{len(ranks)}" for node, ranks in self.node_id_by_rank.items())

    def register(self, hostname: str, node_id: str, world_rank: int) -> None:
        """Record that ``world_rank`` runs on ``node_id`` (its host's name ``hostname``)."""
        self._hostnames.add(hostname)
        self.node_id_by_rank.setdefault(node_id, []).append(world_rank)

    def finalize_registration(self) -> dict[int, dict[str, Any]]:
        """Each rank's local and cross coordinates, as ``HORA_*`` and ``HOROVOD_*`` variables.

        A node's ranks get local ranks in registration order; the cross group of local rank k
        holds the k-th rank of every node that has one, in node order.
        """
        cross_sizes: dict[int, int] = {}
        placed: dict[int, tuple[int, int, int]] = {}
        for ranks in self.node_id_by_rank.values():
            for local_rank, rank in enumerate(ranks):
                placed[rank] = (local_rank, len(ranks), cross_sizes.get(local_rank, 0))
                cross_sizes[local_rank] = placed[rank][2] + 1
        size = self.world_size
        return {rank: _coordinates_env(rank, size, local, local_size, cross,
                                       cross_sizes[local])
                for rank, (local, local_size, cross) in sorted(placed.items())}

    def establish_rendezvous(self) -> dict[str, str]:
        """Start the job's rendezvous store; the variables every worker needs to reach it.

        The store listens on 127.0.0.1 when every rank runs on this node, else on this node's
        address. The secret (``settings.key``) is among the variables: they travel to the
        workers only through Ray.
        """
        from hora import _core

        address = store_address(self.node_id_by_rank)
        self._store = _core.StoreServer(address, 0, self.settings.key)
        env = {"HORA_RENDEZVOUS_ADDR": address, "HORA_RENDEZVOUS_PORT": str(self._store.port),
               "HORA_SECRET": self.settings.key,
               "HORA_START_TIMEOUT": str(self.settings.timeout_s)}
        env.update(nics_env(self.settings.nics))
        return env

    def stop_rendezvous(self) -> None:
        """Stop the store (the job is over)."""
        if self._store is not None:
            self._store.stop()
            self._store = None


def gather(refs: Sequence[Any], on_failure: Callable[[], None]) -> list[Any]:
    """The values of ``refs`` (one per rank, in rank order). When one fails, ``on_failure()``
    runs (it stops the job) and that failure is raised, naming the rank."""
    import ray

    index = {ref: rank for rank, ref in enumerate(refs)}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(done[0])
        except Exception as error:
            on_failure()
            error.add_note(f"hora.ray: rank {index[done[0]]} failed; the job's workers were "
                           "stopped")
            raise
    return list(ray.get(list(refs)))


class StaticAdapter:
    """Runs a fixed-size job: creates the workers, connects them, runs functions on them."""

    def __init__(self, settings: Any, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int = 1,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: float | None = None,
                 use_current_placement_group: bool = True) -> None:
        self.settings = settings
        self.num_workers = num_workers
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = gpus_per_worker
        self.use_current_placement_group = use_current_placement_group
        self.workers: list[Any] = []
        self.strategy: BaseStrategy | None = None
        self.coordinator: Coordinator | None = None

    def _create_strategy(self) -> BaseStrategy:
        from ray.util.placement_group import get_current_placement_group

        inherit = self.use_current_placement_group and get_current_placement_group() is not None
        if self.num_workers or inherit:
            count = self.num_workers or self.num_workers_per_host * (self.num_hosts or 1)
            return PGStrategy(settings=self.settings, num_workers=count, use_gpu=self.use_gpu,
                              cpus_per_worker=self.cpus_per_worker,
                              gpus_per_worker=self.gpus_per_worker,
                              force_create_placement_group=not self.use_current_placement_group)
        return ColocatedStrategy(settings=self.settings, num_hosts=int(self.num_hosts or 1),
                                 num_workers_per_host=self.num_workers_per_host,
                                 use_gpu=self.use_gpu, cpus_per_worker=self.cpus_per_worker,
                                 gpus_per_worker=self.gpus_per_worker)

    def start(self, executable_cls: type | None = None,
              executable_args: Sequence[Any] | None = None,
              executable_kwargs: Mapping[str, Any] | None = None,
              extra_env_vars: Mapping[str, Any] | None = None) -> None:
        """Create and connect the workers, then make each one's executable; on failure (no
        placement in time, an executable that raises) nothing of the job is left running."""
        try:
            self._start(executable_cls, executable_args, executable_kwargs, extra_env_vars)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, executable_cls: type | None, executable_args: Sequence[Any] | None,
               executable_kwargs: Mapping[str, Any] | None,
               extra_env_vars: Mapping[str, Any] | None) -> None:
        import ray

        self.strategy = self._create_strategy()
        workers, _ = self.strategy.create_workers()
        nodes = ray.get([w.node_id.remote() for w in workers])
        hosts = ray.get([w.hostname.remote() for w in workers])
        # Ranks by node: a node's ranks are consecutive, as horarun places them.
        order = sorted(range(len(workers)), key=lambda i: (nodes.index(nodes[i]), i))
        self.workers = [workers[i] for i in order]
        self.coordinator = Coordinator(self.settings)
        for rank, i in enumerate(order):
            self.coordinator.register(hosts[i], nodes[i], rank)
        common = self.coordinator.establish_rendezvous()
        common.update({name: str(value) for name, value in (extra_env_vars or {}).items()})
        coordinates = self.coordinator.finalize_registration()
        ray.get([w.update_env_vars.remote({**coordinates[rank], **common})
                 for rank, w in enumerate(self.workers)])
        ray.get([w.start_executable.remote(executable_cls, list(executable_args or ()),
                                           dict(executable_kwargs or {}))
                 for w in self.workers])

    def _run_remote(self, fn: Callable[[Any], Any]) -> list[Any]:
        return [w.execute.remote(fn) for w in self.workers]

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """``fn(executable)`` on every worker; the results in rank order."""
        del callbacks  # Horovod's rank-0 logging callbacks: Hora's workers log through Ray
        return gather(self._run_remote(fn), self.shutdown)

    def run(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None,
            callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker; the results in rank order."""
        del callbacks
        return gather(self.run_remote(fn, args, kwargs), self.shutdown)

    def run_remote(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
                   kwargs: Mapping[str, Any] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker; one ObjectRef per rank."""
        call_args, call_kwargs = list(args or ()), dict(kwargs or {})
        return self._run_remote(lambda _executable: fn(*call_args, **call_kwargs))

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 only."""
        import ray

        return ray.get(self.workers[0].execute.remote(fn))

    def shutdown(self) -> None:
        """Stop the workers, remove the placement group and stop the store."""
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
        if self.strategy is not None:
            self.strategy.shutdown()
            self.strategy = None
        if self.coordinator is not None:
            self.coordinator.stop_rendezvous()
            self.coordinator = None


class RayExecutor:
    """A Hora job on a Ray cluster (Horovod's ``horovod.ray.RayExecutor``).

    Give ``num_workers`` (packed onto as few nodes as fit, or the caller's placement group), or
    ``num_hosts`` and ``num_workers_per_host`` (that many on each of that many distinct nodes).
    ``min_workers`` (with ``max_workers``) makes an elastic job: see
    :class:`hora.ray.elastic_v2.ElasticAdapter`.

    ``start()`` creates and connects the workers; ``run``/``execute`` run a function on every
    worker and return the results in rank order; ``shutdown()`` ends the job. Under Ray Client
    the executor's state lives in an actor in the cluster, so that the workers can reach its
    store.
    """

    def __init__(self, settings: Any, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int = 1,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: float | None = None, use_current_placement_group: bool = True,
                 min_workers: int | None = None, max_workers: int | None = None,
                 reset_limit: int | None = None, cooldown_range: list[int] | None = None,
                 elastic_timeout: int = 600, override_discovery: bool = True) -> None:
        if max_workers and (not min_workers or min_workers <= 0):
            raise ValueError("`max_workers` provided without any positive `min_workers`: an "
                             "elastic job runs between min_workers and max_workers workers")
        if min_workers and num_workers:
            raise ValueError("Both `min_workers` and `num_workers` provided. Give num_workers "
                             "(a fixed-size job) or min_workers (an elastic job), not both")
        if min_workers is None and not num_workers and not num_hosts:
            raise ValueError("give num_workers, or num_hosts and num_workers_per_host")
        self.settings = settings
        self._elastic = min_workers is not None
        self.settings.elastic = self._elastic
        if self._elastic:
            self._params: dict[str, Any] = {
                "min_workers": min_workers, "max_workers": max_workers, "reset_limit": reset_limit,
                "cooldown_range": cooldown_range, "elastic_timeout": elastic_timeout,
                "override_discovery": override_discovery, "cpus_per_worker": cpus_per_worker,
                "use_gpu": use_gpu, "gpus_per_worker": gpus_per_worker}
        else:
            self._params = {
                "num_workers": num_workers, "num_hosts": num_hosts,
                "num_workers_per_host": num_workers_per_host, "cpus_per_worker": cpus_per_worker,
                "use_gpu": use_gpu, "gpus_per_worker": gpus_per_worker,
                "use_current_placement_group": use_current_placement_group}
        self.adapter: Any = None
        self._is_remote = False

    @classmethod
    def create_settings(cls, timeout_s: int = 30, ssh_identity_file: str | None = None,
                        ssh_str: str | None = None, placement_group_timeout_s: int = 100,
                        nics: set[str] | None = None) -> MiniSettings:
        """Settings for a job: rendezvous timeout, placement timeout, network interface.
        ``ssh_identity_file`` and ``ssh_str`` are accepted for Horovod's scripts: Hora's
        workers never use ssh."""
        del ssh_str
        return MiniSettings(ssh_identity_file=ssh_identity_file, timeout_s=timeout_s,
                            placement_group_timeout_s=placement_group_timeout_s, nics=nics)

    def _adapter_cls(self) -> type:
        if self._elastic:
            from hora.ray.elastic_v2 import ElasticAdapter

            return ElasticAdapter
        return StaticAdapter

    def start(self, executable_cls: type | None = None,
              executable_args: Sequence[Any] | None = None,
              executable_kwargs: Mapping[str, Any] | None = None,
              extra_env_vars: Mapping[str, Any] | None = None) -> None:
        """Create the workers and connect them (each makes ``executable_cls(...)``, if given,
        after its environment is set, so the class may call ``hvd.init()``).

        Raises:
            TimeoutError: Ray could not place the workers in time.
        """
        import ray

        adapter_cls = self._adapter_cls()
        self._is_remote = ray.util.client.ray.is_connected()
        if self._is_remote:
            self.adapter = ray.remote(adapter_cls).options(num_cpus=0).remote(
                self.settings, **self._params)
        else:
            self.adapter = adapter_cls(self.settings, **self._params)
        self._call("start", executable_cls=executable_cls, executable_args=executable_args,
                   executable_kwargs=executable_kwargs, extra_env_vars=extra_env_vars)

    def _call(self, method: str, **kwargs: Any) -> Any:
        if self.adapter is None:
            raise RuntimeError(f"RayExecutor.{method}: the executor is not started; call "
                               "start() first")
        if self._is_remote:
            import ray

            return ray.get(getattr(self.adapter, method).remote(**kwargs))
        return getattr(self.adapter, method)(**kwargs)

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """``fn(executable)`` on every worker; the results in rank order."""
        return self._call("execute", fn=fn, callbacks=callbacks)

    def run(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None,
            callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker; the results in rank order."""
        return self._call("run", fn=fn, args=args, kwargs=kwargs, callbacks=callbacks)

    def run_remote(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
                   kwargs: Mapping[str, Any] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker, without waiting: one ObjectRef per rank."""
        return self._call("run_remote", fn=fn, args=args, kwargs=kwargs)

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 only."""
        return self._call("execute_single", fn=fn)

    def shutdown(self) -> None:
        """Stop the workers and release what the job holds."""
        if self.adapter is None:
            return
        self._call("shutdown")
        if self._is_remote:
            import ray

            ray.kill(self.adapter)
        self.adapter = None
