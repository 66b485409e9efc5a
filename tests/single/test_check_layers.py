"""tests/check_layers.py: a cycle between folders of core/, an include between two transport
backends, or one from the runtime, the ops or the bindings into a backend fails it, naming the
includes; a clean tree and this repository pass."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tests" / "check_layers.py"
_spec = importlib.util.spec_from_file_location("check_layers", CHECKER)
assert _spec is not None and _spec.loader is not None
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A tree whose files (path -> the core/ paths it includes) hold only include lines."""
    for path, includes in files.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("#pragma once\n" + "".join(f'#include "{inc}"\n' for inc in
                                                   includes.split()))
    return root


def _check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60, check=False)


# A small layered tree: common <- net <- transport (with two backends) <- coordinator <- runtime.
CLEAN = {
    "core/common/errors.h": "",
    "core/net/socket.h": "core/common/errors.h",
    "core/net/socket.cc": "core/net/socket.h core/common/errors.h",
    "core/transport/communicator.h": "core/common/errors.h",
    "core/transport/backends.cc": "core/transport/tcp/transport.h core/transport/shm/transport.h",
    "core/transport/tcp/transport.h": "core/transport/communicator.h core/net/socket.h",
    "core/transport/shm/transport.h": "core/transport/communicator.h",
    "core/coordinator/coordinator.h": "core/transport/communicator.h",
    "core/runtime.h": "core/coordinator/coordinator.h core/config.h",
    "core/runtime_loop.cc": "core/runtime.h",
}


def _check_clean_with(tmp_path: Path, path: str, includes: str) -> subprocess.CompletedProcess[str]:
    """The check, allowing no cycle, of CLEAN where ``path`` includes ``includes``."""
    return _check(_tree(tmp_path, {**CLEAN, path: includes}), "--no-allow-list")


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    done = _check(_tree(tmp_path, CLEAN), "--no-allow-list")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no cycle" in done.stdout


def test_a_cycle_between_folders_fails_naming_each_include_of_it(tmp_path: Path) -> None:
    done = _check_clean_with(tmp_path, "core/transport/agree.cc", "core/coordinator/coordinator.h")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "core/coordinator -> core/transport -> core/coordinator" in done.stderr
    assert ("core/coordinator/coordinator.h:2 includes core/transport/communicator.h"
            in done.stderr)
    assert "core/transport/agree.cc:2 includes core/coordinator/coordinator.h" in done.stderr


def test_a_longer_cycle_is_named_whole(tmp_path: Path) -> None:
    done = _check_clean_with(tmp_path, "core/common/errors.h", "core/coordinator/coordinator.h")
    assert done.returncode == 1
    assert "core/common -> core/coordinator -> core/transport -> core/common" in done.stderr


def test_an_allowed_cycle_is_printed_and_a_stale_allowance_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(CLEAN)
    files["core/transport/agree.cc"] = "core/coordinator/coordinator.h"
    root = _tree(tmp_path, files)
    cycle = ("core/coordinator", "core/transport")
    assert check_layers.check(root, {cycle: "kept for now"}) == []
    assert "allowed cycle (kept for now):" in capsys.readouterr().out
    stale = ("core/common", "core/net")
    problems = check_layers.check(root, {cycle: "kept for now", stale: "fixed since"})
    assert problems == [("allowed cycle core/common -> core/net no longer occurs: remove it "
                         "from ALLOWED_CYCLES in tests/check_layers.py")]


def test_one_backend_including_another_fails(tmp_path: Path) -> None:
    done = _check_clean_with(tmp_path, "core/transport/shm/transport.cc",
                             "core/transport/tcp/transport.h")
    assert done.returncode == 1
    assert "core/transport/shm -> core/transport/tcp" in done.stderr
    assert "core/transport/shm/transport.cc:2 includes core/transport/tcp/transport.h" in done.stderr


@pytest.mark.parametrize("header", ["core/transport/shm/transport.h",
                                    "core/transport/nccl/gpu_checks.h"])
def test_the_runtime_including_a_backend_fails(tmp_path: Path, header: str) -> None:
    """No backend is the runtime's own, the GPU's included: GPU requests are checked through
    DeviceBackend."""
    done = _check_clean_with(tmp_path, "core/runtime.cc", f"core/runtime.h {header}")
    backend = header.rsplit("/", 1)[0]
    assert done.returncode == 1
    assert (f"the runtime includes a transport backend ({backend}): core/runtime.cc:3 "
            f"includes {header}") in done.stderr, done.stderr


@pytest.mark.parametrize("path", ["core/ops/gpu_executor.h", "bindings/gpu_intake.cc"])
def test_the_ops_or_the_bindings_including_a_backend_fails(tmp_path: Path, path: str) -> None:
    done = _check_clean_with(tmp_path, path, "core/transport/nccl/communicator.h")
    assert done.returncode == 1
    layer = path.split("/")[0] if path.startswith("bindings") else "core/ops"
    assert (f"{layer} includes a transport backend (core/transport/nccl): {path}:2 includes "
            "core/transport/nccl/communicator.h") in done.stderr, done.stderr


def test_an_allowed_backend_include_passes_and_a_stale_allowance_fails(tmp_path: Path) -> None:
    files = {**CLEAN, "core/ops/gpu_executor.h": "core/transport/nccl/communicator.h"}
    root = _tree(tmp_path, files)
    kept = ("core/ops/gpu_executor.h", "core/transport/nccl")
    assert check_layers.check(root, {}, {kept: "kept for now"}) == []
    stale = ("bindings/gpu_intake.h", "core/transport/nccl")
    problems = check_layers.check(root, {}, {kept: "kept for now", stale: "fixed since"})
    assert problems == [("allowed backend include bindings/gpu_intake.h -> core/transport/nccl "
                         "no longer occurs: remove it from ALLOWED_BACKEND_INCLUDES in "
                         "tests/check_layers.py")]


def test_the_runtime_folder_and_its_top_files_are_one_layer(tmp_path: Path) -> None:
    """core/runtime/ (the background loop's parts) and core/runtime*.h/.cc include each other
    freely; the folder reaching a CPU backend fails like the top files."""
    files = {**CLEAN, "core/runtime/background_loop.h": "core/runtime.h",
             "core/runtime_impl.h": "core/runtime/background_loop.h"}
    done = _check(_tree(tmp_path, files), "--no-allow-list")
    assert done.returncode == 0, done.stdout + done.stderr
    files["core/runtime/background_loop.cc"] = "core/transport/tcp/transport.h"
    done = _check(_tree(tmp_path, files), "--no-allow-list")
    assert done.returncode == 1
    assert "the runtime includes a transport backend (core/transport/tcp)" in done.stderr


def test_an_include_in_a_comment_does_not_count(tmp_path: Path) -> None:
    files = dict(CLEAN)
    root = _tree(tmp_path, files)
    (root / "core/common/errors.h").write_text('// #include "core/runtime.h" would be a cycle\n')
    assert _check(root, "--no-allow-list").returncode == 0


def test_this_repository_passes() -> None:
    done = subprocess.run([sys.executable, str(CHECKER)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
