"""``hora.run``: run a Python function on N ranks and return every rank's result."""

from __future__ import annotations

import base64
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hora.runner import job, launch
from hora.runner.output import FileSink, PrefixSink, Sink
from hora.runner.slots import used_hosts
from hora.runner.task import RESULT_MARK, encode_task, result_path


class _ResultSink:
    """Passes output on to ``inner`` but keeps the result lines of remote ranks."""

    def __init__(self, inner: Sink) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.results: dict[int, bytes] = {}

    def line(self, rank: int, stream: str, data: bytes) -> None:
        at = data.find(RESULT_MARK) if stream == "stdout" else -1
        if at < 0:
            self._inner.line(rank, stream, data)
            return
        if at > 0:
            self._inner.line(rank, stream, data[:at])
        with self._lock:
            self.results[rank] = base64.b64decode(data[at + len(RESULT_MARK):].strip())

    def close(self) -> None:
        self._inner.close()


def _launcher_argv(np: int, hosts: str | None, hostfile: str | None,
                   start_timeout: float | None, ssh_port: int | None,
                   ssh_identity_file: str | None, disable_cache: bool | None,
                   output_filename: str | None, verbose: bool | None, use_gloo: bool | None,
                   network_interface: str | None) -> list[str]:
    argv = ["-np", str(int(np))]
    for flag, value in (("-H", hosts), ("--hostfile", hostfile), ("-p", ssh_port),
                        ("-i", ssh_identity_file), ("--output-filename", output_filename),
                        ("--network-interface", network_interface),
                        ("--start-timeout", start_timeout)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, on in (("--disable-cache", disable_cache), ("--verbose", verbose),
                     ("--gloo", use_gloo)):
        if on:
            argv.append(flag)
    return argv


def run(func: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
        num_proc: int = 1, min_num_proc: int | None = None, max_num_proc: int | None = None,
        slots: int | None = None, reset_limit: int | None = None,
        cooldown_range: tuple[int, int] | None = None, hosts: str | None = None,
        hostfile: str | None = None, start_timeout: float | None = None,
        ssh_port: int | None = None, ssh_identity_file: str | None = None,
        disable_cache: bool | None = None, output_filename: str | None = None,
        verbose: bool | None = None, use_gloo: bool | None = None, use_mpi: bool | None = None,
        mpi_args: str | None = None, network_interface: str | None = None,
        executable: str | None = None, np: int | None = None, min_np: int | None = None,
        max_np: int | None = None, *, env: Mapping[str, str] | None = None) -> list[Any]:
    """Run ``func(*args, **kwargs)`` on ``num_proc`` ranks and return the results, one per rank
    (Horovod's ``horovod.runner.run``, with its parameters in its order).

    The function travels pickled with cloudpickle; each rank runs it in a fresh Python process
    (``executable``, default this interpreter) started like ``horarun`` starts ranks, so it may
    call ``hora.init()`` and use collectives. Its output appears prefixed with the rank, as with
    horarun.

    Args:
        func: the function; it and its result must be picklable by cloudpickle.
        args: its positional arguments (the same on every rank).
        kwargs: its keyword arguments (the same on every rank).
        num_proc: number of ranks. ``np`` is its deprecated name (a DeprecationWarning, as in
            Horovod), used when ``num_proc`` is left at 1.
        min_num_proc: for elastic jobs, which ``run`` does not start (NotSupportedError;
            start ``horarun --min-np ... --max-np ...`` instead); so are ``max_num_proc``,
            ``slots``, ``reset_limit``, ``cooldown_range`` and the deprecated ``min_np`` and
            ``max_np``.
        max_num_proc: see ``min_num_proc``.
        slots: see ``min_num_proc``.
        reset_limit: see ``min_num_proc``.
        cooldown_range: see ``min_num_proc``.
        hosts: ``"host1:2,host2:2"`` (default: ``num_proc`` ranks on this host); or ``hostfile``.
        start_timeout: seconds the ranks wait for each other at start.
        ssh_port: for remote hosts.
        ssh_identity_file: for remote hosts.
        disable_cache: as horarun's flag.
        output_filename: as horarun's flag.
        verbose: as horarun's flag.
        network_interface: as horarun's flag.
        use_gloo: use the built-in TCP transport (the default anyway).
        use_mpi: ``use_mpi=True`` is not supported by ``run``.
        mpi_args: not supported, as ``use_mpi``.
        executable: the Python interpreter of the ranks.
        env: the environment of the ranks in place of this process's (keyword only).

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        ValueError: bad arguments (hosts, slots; both ``hosts`` and ``hostfile``; both
            ``use_gloo`` and ``use_mpi``).
        NotSupportedError: ``use_mpi=True``, or an elastic job.
        RuntimeError: a rank failed (its traceback is in its output) or returned nothing.
        KeyboardInterrupt: the job was interrupted with Ctrl-C.
    """
    import cloudpickle

    from hora.errors import NotSupportedError

    del mpi_args  # only meaningful with use_mpi
    if np is not None:
        warnings.warn("np is deprecated, use num_proc instead", DeprecationWarning, stacklevel=2)
        if num_proc == 1:
            num_proc = np
    if hosts is not None and hostfile is not None:
        raise ValueError("Argument hosts and hostfile only allow one provided.")
    if use_gloo and use_mpi:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")
    elastic = {"min_num_proc": min_num_proc, "max_num_proc": max_num_proc, "slots": slots,
               "reset_limit": reset_limit, "cooldown_range": cooldown_range, "min_np": min_np,
               "max_np": max_np}
    asked = [name for name, value in elastic.items() if value is not None]
    if asked:
        raise NotSupportedError(
            f"hora.run runs a fixed set of ranks; {', '.join(asked)} ask for an elastic job: "
            "start it with horarun --min-np N --max-np M (with --host-discovery-script or -H)")
    if use_mpi:
        raise NotSupportedError("hora.run(use_mpi=True) is not supported; hora.run starts the "
                                "ranks with Hora's built-in launcher (use_gloo)")
    argv = _launcher_argv(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                          disable_cache, output_filename, verbose, use_gloo, network_interface)
    task_dir = tempfile.mkdtemp(prefix="hora-run-")
    command = [executable or sys.executable, "-m", "hora.runner.run_task", task_dir]
    try:
        options = launch.parse_args(argv + command)
    except SystemExit:
        shutil.rmtree(task_dir, ignore_errors=True)
        raise ValueError(f"hora.run: invalid arguments {argv} (see the message above)") from None
    try:
        plan = launch.plan(options.num_proc, options.hosts, options.hostfile)
        blob = cloudpickle.dumps((func, tuple(args), dict(kwargs or {})))
        with open(os.path.join(task_dir, "func.pkl"), "wb") as f:
            f.write(blob)
        remote = job.remote_hosts(used_hosts(plan), options.force_ssh)
        inner: Sink = (FileSink(output_filename, len(plan)) if output_filename else PrefixSink())
        sink = _ResultSink(inner)
        try:
            outcome = job.run_job(options, command, plan, base_env=env, sink=sink,
                                  remote_private=encode_task(blob) if remote else None)
        finally:
            sink.close()
        if outcome.code == 130 and outcome.failed_rank is None:
            raise KeyboardInterrupt
        if outcome.code != 0:
            who = f"rank {outcome.failed_rank}" if outcome.failed_rank is not None else "the job"
            raise RuntimeError(f"hora.run: {who} failed with exit code {outcome.code}; "
                               "see its output above")
        return [_result(task_dir, rank, sink.results, cloudpickle) for rank in range(len(plan))]
    finally:
        shutil.rmtree(task_dir, ignore_errors=True)


def _result(task_dir: str, rank: int, received: Mapping[int, bytes], pickle: Any) -> Any:
    if rank in received:
        return pickle.loads(received[rank])
    try:
        with open(result_path(task_dir, rank), "rb") as f:
            return pickle.loads(f.read())
    except FileNotFoundError:
        raise RuntimeError(f"hora.run: rank {rank} ended without returning a result") from None
