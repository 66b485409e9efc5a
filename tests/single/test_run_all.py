"""tests/run_all.sh itself: its two tiers, its progress lines, it installs into a Python outside a
virtual environment only when asked, and its summary counts skipped tests and names each reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_ALL = ROOT / "tests" / "run_all.sh"


def _base_python() -> str:
    """An interpreter that is not a virtual environment (this one's base when it is one)."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def test_install_into_a_system_python_needs_the_flag(tmp_path: Path) -> None:
    python = _base_python()
    check = subprocess.run([python, "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert check.stdout.strip() == "False"
    # PYTHON answers questions (-c) with the real interpreter but refuses to run pip (-m), so
    # that even a broken guard cannot install anything into it.
    guarded = tmp_path / "python"
    guarded.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then echo "refused: $*" >&2; exit 97; fi\n'
                       f'exec {python} "$@"\n')
    guarded.chmod(0o755)
    env = {**os.environ, "PYTHON": str(guarded)}
    done = subprocess.run(["bash", str(RUN_ALL), "--only", "install"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a virtual environment" in done.stderr and "--system-install" in done.stderr
    assert "refused:" not in done.stderr and "pip install" not in done.stdout


def test_ci_asks_for_the_system_install_and_the_full_tier() -> None:
    assert "bash tests/run_all.sh --system-install --full\n" in (ROOT / ".ci" / "run").read_text()


def _plan(*args: str) -> dict[str, str]:
    done = subprocess.run(["bash", str(RUN_ALL), "--plan", *args], capture_output=True, text=True,
                          timeout=60, check=True)
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def test_the_quick_tier_is_the_default_and_leaves_the_long_stages_to_full() -> None:
    quick = _plan()
    assert quick == {"tier": "quick", "rank counts": "2", "chaos scenarios": "20",
                     "stages": "install cpp single core torch gpu mpi mxnet tensorflow docs "
                               "chaos elastic"}
    full = _plan("--full")
    assert full == {"tier": "full", "rank counts": "1 2 3 4", "chaos scenarios": "200",
                    "stages": "install cpp single core torch torchsuite gpu mpi mpi-flavours clients "
                              "ray spark jax mxnet tensorflow docs chaos elastic multihost fuzz "
                              "asan tsan"}
    # What the user asks for wins over the tier's choice.
    assert _plan("--full", "--skip-install", "--np", "3", "--only", "core,install")["stages"] == \
        "core"
    assert _plan("--np", "3 4")["rank counts"] == "3 4"


def test_an_unknown_stage_is_refused() -> None:
    done = subprocess.run(["bash", str(RUN_ALL), "--only", "core,torhc"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and "unknown stage torhc" in done.stderr


def test_progress_names_the_stage_its_number_and_the_time(tmp_path: Path) -> None:
    script = ("T_START=$SECONDS; STAGE_COUNT=3; STAGE_NO=1; TIER=quick; STOPPED=0; KEEP_GOING=0; "
              f"PASSED=0; FAILED=0; TIMINGS=(); FAILURES=(); RUN_LOG={tmp_path / 'log'}\n"
              f"{_functions('elapsed', 'stage', 'collect_skips', 'run')}\n"
              'stage torch; run "np=2 a test" true; run "np=2 another" false; '
              'echo "passed=$PASSED failed=$FAILED"')
    lines = _run_bash(script)
    assert "######## stage 2 of 3: torch (quick tier, 0m00s elapsed)" in lines
    assert "=== [2/3 torch, 0m00s] np=2 a test" in lines
    assert "=== np=2 a test: ok (0s)" in lines
    assert "=== np=2 another: FAILED with exit 1 (0s)" in lines
    assert lines[-1] == "passed=1 failed=1"


def test_every_stage_announces_itself() -> None:
    text = RUN_ALL.read_text()
    stages = re.search(r'^ALL_STAGES="([a-z,-]+)"$', text, re.MULTILINE)
    assert stages is not None
    for name in stages.group(1).split(","):
        assert f"if wants {name}; then\n  stage {name}\n" in text, name


def _functions(*names: str) -> str:
    text = RUN_ALL.read_text()
    found = []
    for name in names:
        function = re.search(rf"^{name}\(\) \{{.*?^\}}", text, re.DOTALL | re.MULTILINE)
        assert function is not None, name
        found.append(function.group(0))
    return "\n".join(found)


def _run_bash(script: str) -> list[str]:
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout.splitlines()


def _collect_skips(log: str, tmp_path: Path) -> tuple[int, list[str]]:
    """Runs run_all.sh's collect_skips on ``log`` as a step's output."""
    (tmp_path / "log").write_text(log)
    lines = _run_bash(f"TESTS_SKIPPED=0; SKIP_REASONS=(); RUN_LOG={tmp_path / 'log'}\n"
                      f"{_functions('collect_skips')}\n"
                      'collect_skips "the stage"; echo "$TESTS_SKIPPED"; '
                      'printf "%s\\n" "${SKIP_REASONS[@]}"')
    return int(lines[0]), [line for line in lines[1:] if line]


def test_skips_are_counted_with_their_reasons(tmp_path: Path) -> None:
    lines = [
        ".....sss",
        "SKIPPED [1] tests/single/test_launcher_ssh.py:84: sshd is not running",
        "SKIPPED [2] tests/single/test_x.py:9: needs two ranks",
        # horarun's per-rank prefixes: the same report from two ranks counts once
        "[0]<stdout>:SKIPPED [3] tests/parallel/test_y.py:5: needs MPI",
        "[1]<stdout>:SKIPPED [3] tests/parallel/test_y.py:5: needs MPI",
        # pytest colours its report under mpirun
        "\x1b[33mSKIPPED\x1b[0m [1] tests/parallel/test_z.py:7: coloured",
        "5 passed, 7 skipped",
    ]
    log = "".join(line + "\n" for line in lines)
    count, reasons = _collect_skips(log, tmp_path)
    assert count == 7
    assert sorted(reasons) == sorted([
        "the stage: 1 skipped: tests/single/test_launcher_ssh.py:84: sshd is not running",
        "the stage: 2 skipped: tests/single/test_x.py:9: needs two ranks",
        "the stage: 3 skipped: tests/parallel/test_y.py:5: needs MPI",
        "the stage: 1 skipped: tests/parallel/test_z.py:7: coloured",
    ])
    assert _collect_skips("10 passed\n", tmp_path) == (0, [])


def test_the_summary_names_skips_disk_use_and_framework_imports() -> None:
    text = RUN_ALL.read_text()
    assert 'echo "skipped tests:"' in text
    assert "tests skipped" in text and "disk left under build/" in text
    # The framework stages check the import before their tests, so importorskip cannot hide it.
    for name in ("mxnet", "tensorflow", "jax"):
        stage = text[text.index(f"if wants {name}; then"):]
        assert stage.index(f"framework_imports {name}") < stage.index(
            f"framework_parallel_tests {name}")
