"""The Ray actor that hosts one rank of a :class:`~hora.ray.RayExecutor` job.

Each worker is a long-lived actor: the executor sets its environment (rank, host coordinates,
the rendezvous store and the job secret, all sent through Ray), then runs functions on it;
``hvd.init()`` inside them reads that environment as it reads horarun's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class BaseHorovodWorker:
    """One rank of the job (Horovod's ``horovod.ray.worker.BaseHorovodWorker``).

    ``executable`` is the object made by :meth:`start_executable` (``None`` until then); the
    functions given to :meth:`execute` receive it.
    """

    executable: Any = None

    def __init__(self, world_rank: int = 0, world_size: int = 1) -> None:
        self.update_env_vars({"HORA_HOSTNAME": self.node_id(), "HOROVOD_HOSTNAME": self.node_id(),
                              "HORA_RANK": world_rank, "HOROVOD_RANK": world_rank,
                              "HORA_SIZE": world_size, "HOROVOD_SIZE": world_size})

    def node_id(self) -> str:
        """The Ray node this worker runs on (its host, as far as the job is concerned)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def hostname(self) -> str:
        """This machine's host name."""
        return socket.gethostname()

    def get_gpu_ids(self) -> list[int]:
        """The GPUs Ray gave this worker."""
        import ray

        return [int(i) for i in ray.get_gpu_ids()]

    def update_env_vars(self, env_vars: Mapping[str, Any]) -> None:
        """Set these variables in the worker's process (values are turned into strings)."""
        os.environ.update({name: str(value) for name, value in env_vars.items()})

    def env_vars(self) -> dict[str, str]:
        """The worker process's environment."""
        return dict(os.environ)

    def start_executable(self, executable_cls: type | None = None,
                         executable_args: Sequence[Any] | None = None,
                         executable_kwargs: Mapping[str, Any] | None = None) -> None:
        """Make ``executable_cls(*executable_args, **executable_kwargs)`` this worker's
        executable (nothing when ``executable_cls`` is None)."""
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or ()),
                                             **dict(executable_kwargs or {}))

    def execute(self, func: Callable[[Any], Any]) -> Any:
        """``func(executable)``: run a function of the executable on this worker."""
        return func(self.executable)


BaseHoraWorker = BaseHorovodWorker
"""Hora's name for :class:`BaseHorovodWorker`."""
