"""Runs PyTorch's own backend conformance suite over one backend and prints what passed.

The suite is ``torch/testing/_internal/distributed/distributed_test.py`` from the installed torch
wheel (``DistributedTest._DistTestBase`` on ``TestDistBackend``); every test spawns
``--world-size`` ranks on this host, CPU only. ``distributed_suite.py`` is the pytest module that
binds the two as PyTorch's own ``test_distributed_spawn.py`` does; this script prepares the
environment, runs pytest on it in this process and prints the summary::

    python3 tests/torch_suite/run_suite.py --backend gloo
    cd tests/torch_suite && python3 run_suite.py --backend hora --tests-file ci_tests.txt
    python3 tests/torch_suite/run_suite.py --backend hora -k "all_reduce and not cuda" -- -x

Name gates. The suite compares ``BACKEND`` with backend names about 260 times, mostly with
``"gloo"``, in decorators evaluated at import and in test bodies. For ``--backend hora`` the suite
module is executed from its installed source with ``BACKEND`` bound to a string that is ``"hora"``
but also compares and hashes equal to ``"gloo"``, so every test that gloo runs is open for hora;
``"hora"`` is also put in ``DistTestCases.backend_feature["plugin"]``, the suite's own switch for
out-of-tree backends (details in ``suite_loader.py``). Tests that check gloo-specific behaviour
Hora intentionally does differently stay closed, each with its reason: ``CLOSED_FOR_HORA`` in
``distributed_suite.py``. A feature Hora lacks is never closed; it shows as a failure.

Environment. The suite reads ``BACKEND``, ``WORLD_SIZE``, ``TEMP_DIR`` and ``INIT_METHOD``; this
script sets them, with ``TEMP_DIR`` (and ``TMPDIR``, where the suite leaves its per-test store
files) a fresh directory removed at the end, ``MASTER_ADDR`` the loopback address and
``MASTER_PORT`` a free port (renewed before every test), the compiled suite's cache
(``TORCH_SUITE_CODE_CACHE``, so the ranks do not compile it again) and the per-test timeout
(``DISTRIBUTED_TESTS_DEFAULT_TIMEOUT``, after which the suite terminates a test's ranks; a parent
stuck past it plus a minute is interrupted too). Launcher variables that would place the ranks
in another world (``RANK``, ``LOCAL_RANK``, ``HORA_*``, ``HOROVOD_*``, ``OMPI_*``, ``PMI_*``,
``SLURM_*``) are removed; ``--env NAME=VALUE`` sets one for the ranks (e.g. a Hora log level).

``--init-method`` is ``INIT_METHOD`` as PyTorch's test runner sets it. Its runner sets none now,
so the module default ``env://`` applies, which is this script's default. Either way the suite
starts each test's default group from a per-test file store and its own ``setUp`` points the
ranks' ``INIT_METHOD`` at a per-test file, as in PyTorch's CI; the choice decides the tests
gated on it at import (``test_barrier_timeout_global`` runs with ``file`` only).

Selection: ``-k EXPR`` (pytest's), ``--tests-file FILE`` (one test per line: a method name such as
``test_all_reduce_sum`` or a pytest node id; ``#`` starts a comment), and anything after ``--``
goes to pytest unchanged (``--junitxml`` is an option here too). ``--results FILE`` writes every
test's outcome, time and error line as JSON, for ``compare_runs.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE_FILE = os.path.join(HERE, "distributed_suite.py")
SUITE_CLASS = "TestDistBackendWithSpawn"
BACKENDS = ("gloo", "hora")
DEFAULT_TIMEOUT_SECONDS = 180
_PLACEMENT_NAMES = {"RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"}
_PLACEMENT_PREFIXES = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "PMIX_", "SLURM_")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; what follows ``--`` is kept for pytest as ``pytest_args``."""
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True, choices=BACKENDS)
    parser.add_argument("--world-size", type=int, default=2, help="ranks per test (default 2)")
    parser.add_argument("--init-method", choices=("env", "file"), default="env",
                        help="INIT_METHOD as PyTorch's test runner sets it (default env)")
    parser.add_argument("--start-method", choices=("spawn", "fork"), default="spawn",
                        help="how each test starts its ranks: spawn (a fresh interpreter each, "
                        "as PyTorch's own runner; the default) or fork (a copy of the test "
                        "process, which skips importing torch and the suite again: about 5x "
                        "faster)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression over test names")
    parser.add_argument("--tests-file", help="file with one test name or node id per line")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_SECONDS,
                        help=f"seconds per test (default {DEFAULT_TIMEOUT_SECONDS})")
    parser.add_argument("--junitxml", help="write pytest's JUnit XML report here")
    parser.add_argument("--results", help="write every test's outcome as JSON here")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the ranks (repeatable)")
    args = parser.parse_args(argv)
    if args.world_size < 2:
        parser.error("--world-size must be at least 2")
    for item in args.env:
        if "=" not in item:
            parser.error(f"--env {item}: expected NAME=VALUE")
    args.pytest_args = extra
    return args


def read_tests_file(path: str) -> list[str]:
    """The pytest node ids named in ``path``: one test name or node id per line."""
    ids = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            ids.append(name if "::" in name else f"{SUITE_FILE}::{SUITE_CLASS}::{name}")
    return ids


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare_environment(args: argparse.Namespace, temp_dir: str) -> str:
    """Set what the suite reads; returns the INIT_METHOD set."""
    for name in list(os.environ):
        if name in _PLACEMENT_NAMES or name.startswith(_PLACEMENT_PREFIXES):
            del os.environ[name]
    for sub in ("barrier", "test_dir"):
        os.mkdir(os.path.join(temp_dir, sub))
    init_method = "env://" if args.init_method == "env" else f"file://{temp_dir}/shared_init_file"
    os.environ.update({
        "BACKEND": args.backend,
        "WORLD_SIZE": str(args.world_size),
        "TEMP_DIR": temp_dir,
        "TMPDIR": temp_dir,
        "INIT_METHOD": init_method,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout),
        "TORCH_SUITE_CODE_CACHE": temp_dir,
        "TORCH_SUITE_START_METHOD": args.start_method,
    })
    os.environ.update(item.split("=", 1) for item in args.env)
    tempfile.tempdir = None  # let tempfile see TMPDIR
    return init_method


def pytest_arguments(args: argparse.Namespace) -> list[str]:
    """pytest's command line for this run."""
    selected = read_tests_file(args.tests_file) if args.tests_file else [SUITE_FILE]
    command = selected + ["-v", "-p", "no:cacheprovider", "--rootdir", HERE, "-o", "addopts="]
    if args.keyword:
        command += ["-k", args.keyword]
    if args.junitxml:
        command += ["--junitxml", args.junitxml]
    return command + args.pytest_args


def main(argv: list[str] | None = None) -> int:
    """Run the suite as the command line asks; exit status 0 when no test failed or errored."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sys.path.insert(0, HERE)
    import pytest
    from suite_report import ResultCollector, SuiteRun, print_summary

    temp_dir = tempfile.mkdtemp(prefix=f"torch_suite_{args.backend}_")
    try:
        init_method = prepare_environment(args, temp_dir)
        run = SuiteRun(args.backend, args.world_size, init_method, args.timeout)
        started = time.monotonic()
        status = pytest.main(pytest_arguments(args), plugins=[ResultCollector(run)])
        run.seconds = round(time.monotonic() - started, 1)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    print_summary(run, sys.stdout)
    if args.results:
        run.save(args.results)
    counts = run.counts()
    if status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return int(status)
    return 1 if counts.get("failed") or counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
