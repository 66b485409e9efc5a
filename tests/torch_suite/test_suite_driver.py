"""The driver's own pieces, fast and without spawning ranks: the gloo-gated name, the loaded
suite's gates for hora, and the error line of the summary. ``pytest tests/torch_suite`` runs
these (the suite itself, ``distributed_suite.py``, is only collected when named)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import unittest

import pytest
from suite_loader import GlooGatedName, close_tests
from suite_report import error_line

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_gated_name_is_hora_and_equals_gloo_from_either_side() -> None:
    name = GlooGatedName("hora")
    assert name == "hora" and name == "gloo" and "gloo" == name
    assert not (name != "gloo") and not ("gloo" != name)  # noqa: SIM202
    assert name != "nccl" and "mpi" != name
    assert f"{name}" == "hora" and str(name) == "hora"


def test_the_gated_name_is_found_where_gloo_is_and_nowhere_else() -> None:
    name = GlooGatedName("hora")
    assert name in {"gloo"} and name in {"nccl", "gloo", "ucc"} and name in ["gloo", "mpi"]
    assert name not in {"nccl"} and name not in ["nccl", "ucc"]


def test_lower_and_upper_give_the_backends_own_name() -> None:
    name = GlooGatedName("hora")
    assert type(name.lower()) is str and name.lower() == "hora" and name.upper() == "HORA"


def test_the_loaded_suite_runs_the_gloo_gated_tests_for_hora() -> None:
    script = textwrap.dedent("""
        import __future__, os, sys
        os.environ.update(BACKEND="hora", WORLD_SIZE="2", TEMP_DIR="/tmp")
        sys.path.insert(0, sys.argv[1])
        from suite_loader import load_suite
        suite = load_suite("hora")
        base = suite.DistributedTest._DistTestBase
        from torch.testing._internal.common_distributed import DistTestCases
        print(suite.BACKEND.lower(), "hora" in DistTestCases.backend_feature["plugin"])
        print(getattr(base.test_sparse_all_reduce_sum, "__unittest_skip__", False),
              getattr(base.test_scatter_object_list, "__unittest_skip__", False),
              getattr(base.test_send_recv_nccl, "__unittest_skip__", False))
        flag = __future__.annotations.compiler_flag
        print(bool(base.test_get_backend.__code__.co_flags & flag))
    """)
    out = subprocess.run([sys.executable, "-c", script, HERE], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split("\n")
    assert out[:3] == ["hora True", "False False True", "False"]


def test_the_error_line_is_the_exception_of_the_first_failing_rank() -> None:
    report = (
        "E   RuntimeError: Process 1 exited with error code 10 and exception:\n"
        "E   Traceback (most recent call last):\n"
        'E     File "x.py", line 3, in f\n'
        "E   hora.errors.NotSupportedError: hora backend does not support reduce\n"
        "E   Process 0 exited with error code 10 and exception:\n"
        "E   ValueError: something else\n"
    )
    assert error_line(report) == (
        "[rank 1] hora.errors.NotSupportedError: hora backend does not support reduce")


def test_the_error_line_of_a_rank_that_died_outside_the_test_comes_from_its_stderr() -> None:
    report = "E   AssertionError: Scalars are not equal!\nE   Expected exit code 0 but got 1"
    stderr = (
        "Process process 0:\n"
        "Traceback (most recent call last):\n"
        '  File "backend.py", line 53, in open_channel\n'
        "AttributeError: module 'hora._core' has no attribute 'PointToPoint'\n"
    )
    assert error_line(report, stderr) == (
        "[rank 0] AttributeError: module 'hora._core' has no attribute 'PointToPoint'")


def test_a_closed_test_is_skipped_with_its_reason_and_an_unknown_name_is_refused() -> None:
    class Suite(unittest.TestCase):
        def test_gloo_only_detail(self) -> None:
            raise AssertionError("should not run")

    close_tests(Suite, {"test_gloo_only_detail": "checks gloo's thread count"}, "hora")
    result = unittest.TestResult()
    Suite("test_gloo_only_detail").run(result)
    assert result.skipped[0][1] == "closed for hora: checks gloo's thread count"
    with pytest.raises(RuntimeError, match="no such test"):
        close_tests(Suite, {"test_that_is_not_there": "any"}, "hora")


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_the_start_method_asked_for_reaches_the_suite(method: str, tmp_path) -> None:
    from run_suite import parse_args, prepare_environment
    saved = dict(os.environ)  # prepare_environment sets and removes variables of this process
    try:
        prepare_environment(parse_args(["--backend", "hora", "--start-method", method]),
                            str(tmp_path))
        script = "import distributed_suite as s; print(s.START_METHOD)"
        out = subprocess.run([sys.executable, "-c", script], check=False, cwd=HERE,
                             capture_output=True, text=True, timeout=120)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == method
