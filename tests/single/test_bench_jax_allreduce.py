"""bench/jax_allreduce.py: its --help, its tables and targets from made-up runs (hora jit
supported or not), its results fitting the one schema, and (full tier, in build/venv-jax) its
smallest real run writing a results file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hora
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # the scripts import their helpers as common.*, as when run

import jax_allreduce as bench
from common import results

SCRIPT = BENCH / "jax_allreduce.py"
VENV_PYTHON = ROOT / "build" / "venv-jax" / "bin" / "python"
HORA_PATH = str(Path(hora.__file__).resolve().parents[1])  # the hora under test
RUN_SECONDS = 300

# implementation -> (4 B, 1 MiB, step) in seconds
TIMES = {
    bench.HORA_JIT: (40e-6, 200e-6, 2e-3),
    bench.HORA_EAGER: (80e-6, 400e-6, 8e-3),
    bench.MPI4JAX: (100e-6, 300e-6, 4e-3),
    bench.GLOO: (20e-6, 100e-6, 400e-3),
}


def made_up_run(impl: str, times: tuple[float, float, float]) -> dict[str, Any]:
    """A worker's JSON as hora_worker, mpi4jax_worker and gloo_worker write it."""
    run: dict[str, Any] = {
        "impl": impl, "world": 2, "version": None,
        "results": [{"bytes": n, "median_s": t, "min_s": t, "iters": 10}
                    for n, t in zip((4, 1 << 20), times)],
        "step": {"tensors": 200, "bytes_each": 16384, "median_s": times[2],
                 "min_s": times[2], "iters": 10},
    }
    if impl == bench.HORA_EAGER:
        run["mlp"] = {"steps": 5, "steps_per_s": 100.0, "median_s": 0.01, "min_s": 0.009,
                      "batch_per_rank": 32, "widths": [16, 64, 64, 1], "first_loss": 0.9,
                      "last_loss": 0.5}
    return run


def rows_of(*impls: str) -> list[dict[str, Any]]:
    return [row for impl in impls for row in bench.result_rows(made_up_run(impl, TIMES[impl]))]


def test_help_runs_without_jax() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:") and "--json" in done.stdout


def test_side_by_side_divides_by_hora_jit() -> None:
    rows = rows_of(*bench.IMPLEMENTATIONS)
    assert bench.table(rows) == [
        ("| case | hora jit | hora eager | mpi4jax | jax gloo | hora eager / hora jit "
         "| mpi4jax / hora jit | jax gloo / hora jit |"),
        "|---|---|---|---|---|---|---|---|",
        "| 4 B | 40.0 us | 80.0 us | 100.0 us | 20.0 us | 2.00 | 2.50 | 0.50 |",
        "| 1 MiB | 200.0 us | 400.0 us | 300.0 us | 100.0 us | 2.00 | 1.50 | 0.50 |",
        "| 200 x 16 KiB step | 2.00 ms | 8.00 ms | 4.00 ms | 400.00 ms | 4.00 | 2.00 | 200.00 |",
    ]
    assert bench.targets(rows) == [
        "hora jit ahead of mpi4jax at 1 MiB, step: met",
        "hora jit ahead of jax gloo at 1 MiB, step: NOT met at 1 MiB",
        "hora jit within 2x of mpi4jax at 4 B: 0.40x, met",
    ]


def test_without_jit_support_the_column_reads_na_and_ratios_are_to_eager() -> None:
    rows = rows_of(bench.HORA_EAGER, bench.MPI4JAX, bench.GLOO)
    lines = bench.table(rows, [bench.HORA_JIT])
    assert lines[0] == ("| case | hora jit | hora eager | mpi4jax | jax gloo "
                        "| mpi4jax / hora eager | jax gloo / hora eager |")
    assert lines[2] == (f"| 4 B | {bench.NOT_SUPPORTED} | 80.0 us | 100.0 us | 20.0 us "
                        "| 1.25 | 0.25 |")
    assert bench.targets(rows) == ["hora jit did not run: targets not measured"]
    mlp = bench.mlp_table(rows, {bench.HORA_JIT: "NotSupportedError: ..."})
    assert mlp[2:] == ["| hora eager | 100.0 | 10.00 ms | 0.9000 -> 0.5000 |",
                       f"| hora jit | {bench.NOT_SUPPORTED} | - | - |"]


def test_repeats_keep_the_least_median_and_every_median() -> None:
    slow = made_up_run(bench.HORA_EAGER, (90e-6, 300e-6, 9e-3))
    fast = made_up_run(bench.HORA_EAGER, (80e-6, 400e-6, 8e-3))
    fast["mlp"]["steps_per_s"] = 50.0
    rows = bench.by_implementation(bench.result_rows(bench.best_of([slow, fast])))
    eager = rows[bench.HORA_EAGER]
    assert eager[4]["median_s"] == 80e-6 and eager[4]["repeat_medians_s"] == [90e-6, 80e-6]
    assert eager[1 << 20]["median_s"] == 300e-6
    assert eager["step"]["median_s"] == 8e-3
    assert eager["mlp"]["steps_per_s"] == 100.0
    assert eager["mlp"]["repeat_steps_per_s"] == [100.0, 50.0]


def test_rows_fit_the_results_schema() -> None:
    rows = rows_of(*bench.IMPLEMENTATIONS)
    args = bench.build_parser().parse_args([])
    settings = bench.settings_of(args, [4, 1 << 20], {})
    doc = results.Recorder("jax_allreduce").document(settings, rows)
    assert results.problems(doc) == []
    busbw = [r["busbw_gbs"] for r in rows if r["case"] == "allreduce"]
    assert busbw[1] == pytest.approx((1 << 20) / 200e-6 / 1e9)  # 2 ranks: busbw = algbw


def venv_env() -> dict[str, str] | None:
    """The environment in which build/venv-jax's python imports hora.jax, or None: the venv's
    own hora (CI installs the wheel there), else the hora under test put on its path (a source
    tree, never a whole site-packages, whose packages would shadow the venv's)."""
    if not VENV_PYTHON.exists():
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    candidates = [dict(env)]
    if not HORA_PATH.rstrip(os.sep).endswith("site-packages"):
        candidates.append({**env, "PYTHONPATH": os.pathsep.join(
            [HORA_PATH, *filter(None, [env.get("PYTHONPATH")])])})
    for candidate in candidates:
        probe = subprocess.run([str(VENV_PYTHON), "-c", "import hora.jax, optax"],
                               env=candidate, capture_output=True, timeout=120, check=False)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.mark.full_tier  # one job per implementation, each importing JAX: about 30 s
def test_smallest_run_writes_the_schema(tmp_path: Path) -> None:
    env = venv_env()
    if env is None:
        pytest.skip("build/venv-jax with hora.jax and optax is missing")
    out = tmp_path / "out.json"
    done = subprocess.run(
        [str(VENV_PYTHON), str(SCRIPT), "--np", "1", "--sizes", "4", "--iters", "1", "--repeats", "1",
         "--mlp-steps", "1", "--bind-to", "none", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_SECONDS, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert results.problems(doc) == []
    assert doc["benchmark"] == "jax_allreduce"
    impls = {r["implementation"] for r in doc["results"]}
    assert {bench.HORA_EAGER, bench.GLOO} <= impls
    assert bench.HORA_JIT in impls or bench.HORA_JIT in doc["settings"]["unsupported"]
    assert f"results: {out}" in done.stdout
