"""How an estimator runs its training function on the ranks (Horovod's
``horovod.spark.common.backend``): a :class:`Backend` runs ``fn`` once per rank and returns the
results in rank order. :class:`SparkBackend`, the default, runs them with ``hora.spark.run``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


class Backend:
    """Runs a function on every rank of a Hora job."""

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (),
            kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]:
        """``[fn(*args, **kwargs) on rank 0, on rank 1, ...]``."""
        raise NotImplementedError

    def num_processes(self) -> int:
        """How many ranks :meth:`run` starts."""
        raise NotImplementedError


class SparkBackend(Backend):
    """Runs the ranks as the tasks of a Spark barrier stage (``hora.spark.run``).

    Args:
        num_proc: ranks (default: the active SparkContext's default parallelism).
        env: variables set in every rank.
        start_timeout: as ``hora.spark.run``.
        verbose: as ``hora.spark.run``.
        nics: as ``hora.spark.run``.
        kwargs: ``hora.spark.run``'s other parameters (``stdout``, ``use_mpi``, ...).
    """

    def __init__(self, num_proc: int | None = None, env: Mapping[str, str] | None = None,
                 start_timeout: float | None = None, verbose: int = 1,
                 nics: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        unknown = set(kwargs) - {"stdout", "stderr", "prefix_output_with_timestamp", "use_mpi",
                                 "use_gloo", "extra_mpi_args", "executable"}
        if unknown:
            raise TypeError(f"SparkBackend got unexpected arguments {sorted(unknown)}")
        self._num_proc = num_proc
        self._env = dict(env or {})
        self._start_timeout = start_timeout
        self._verbose = verbose
        self._nics = nics
        self._run_kwargs = kwargs

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (),
            kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]:
        from hora.spark.runner import run

        return run(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(),
                   start_timeout=self._start_timeout, env={**self._env, **(env or {})},
                   verbose=self._verbose, nics=self._nics, **self._run_kwargs)

    def num_processes(self) -> int:
        if self._num_proc is None:
            from hora.spark.runner import active_context

            self._num_proc = int(active_context().defaultParallelism)
        return self._num_proc


__all__ = ["Backend", "SparkBackend"]
