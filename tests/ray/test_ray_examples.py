"""The README's Ray lines: ``examples/ray/ray_mlp.py`` trains the demo's MLP on 2 Ray workers
(RayExecutor, and Ray Train) to the same parameters as ``horarun -np 2`` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ["--epochs", "1", "--samples", "4096"]


def _run(argv: list[str], timeout: float = 240) -> None:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def horarun_params(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = tmp_path_factory.mktemp("horarun") / "params.pt"
    _run([sys.executable, "-m", "hora.runner", "-np", "2", sys.executable,
          "examples/pytorch/train_mlp.py", *DEMO, "--save-params", str(path)])
    return torch.load(path)


@pytest.mark.parametrize("how", [[], ["--ray-train"]], ids=["executor", "ray-train"])
def test_ray_example_trains_like_horarun(horarun_params: dict, tmp_path: Path,
                                         how: list[str]) -> None:
    path = tmp_path / "params.pt"
    _run([sys.executable, "examples/ray/ray_mlp.py", "--num-workers", "2", *how,
          "--storage", str(tmp_path / "storage"), *DEMO, "--save-params", str(path)])
    got = torch.load(path)
    assert got.keys() == horarun_params.keys()
    for name, value in horarun_params.items():
        assert torch.equal(got[name], value), name
    assert os.path.getsize(path) > 0
