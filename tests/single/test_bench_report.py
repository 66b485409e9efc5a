"""The benchmarks' results files and bench/report.py: the tables, plots and README headline made
from a small fixture, ``--check`` failing on anything stale, every script's --help, and every
script's results file fitting the one schema (from the smallest real run that is quick here, or
from its row builder where the framework is not installed)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # the scripts import their helpers as common.*, as when run

import report
from common import results, sizes, tables
from reporting import headline, plots
from reporting.inputs import BENCHMARKS

RUN_SECONDS = 240

# ------------------------------------------------------------------------------------------------
# A small fixture: 2 ranks, Hora, Open MPI and gloo at the headline's sizes and the step.

TIMES = {  # implementation -> (4 B, 4 KiB, 1 MiB, 64 MiB, step) in seconds
    "hora shm": (10e-6, 12e-6, 130e-6, 11e-3, 1.25e-3),
    "gloo": (80e-6, 200e-6, 520e-6, 44e-3, 400e-3),
    "mpi4py": (1e-6, 5e-6, 156e-6, 22e-3, 1.25e-3),
}
SIZES = (4, 4096, 1 << 20, 64 << 20)


def fixture_doc() -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for impl, times in TIMES.items():
        rows += [{"implementation": impl, "case": "allreduce", "bytes": n, "median_s": t,
                  "min_s": t, "iters": 10, "algbw_gbs": n / t / 1e9, "busbw_gbs": n / t / 1e9}
                 for n, t in zip(SIZES, times)]
        rows.append({"implementation": impl, "case": "step", "tensors": 200, "bytes": 16384,
                     "median_s": times[-1], "min_s": times[-1], "iters": 10})
    return {
        "benchmark": "allreduce",
        "argv": ["python", "bench/allreduce.py", "--np", "2"],
        "date": "2025-01-31T12:00:00Z",
        "machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 8.0, "kernel": "6.1.0",
                    "load_average_before": [0.5, 0.4, 0.3],
                    "load_average_after": [0.7, 0.5, 0.3]},
        "versions": {"hora": "0.1.0", "hora_commit": "abc1234", "python": "3.11.7",
                     "torch": "2.13.0"},
        "settings": {"ranks": 2, "dtype": "float32", "op": "Sum", "in_place": True,
                     "sizes": list(SIZES), "iters": 20, "bind_to": "core", "step_tensors": 200,
                     "step_tensor_bytes": 16384},
        "results": rows,
    }


EXPECTED_TABLE = """\
| case | hora shm | gloo | mpi4py | gloo / hora shm | mpi4py / hora shm |
|---|---|---|---|---|---|
| 4 B | 10.0 us | 80.0 us | 1.0 us | 8.00 | 0.10 |
| 4 KiB | 12.0 us | 200.0 us | 5.0 us | 16.67 | 0.42 |
| 1 MiB | 130.0 us | 520.0 us | 156.0 us | 4.00 | 1.20 |
| 64 MiB | 11.00 ms | 44.00 ms | 22.00 ms | 4.00 | 2.00 |
| 200 x 16 KiB step | 1.25 ms | 400.00 ms | 1.25 ms | 320.00 | 1.00 |"""

EXPECTED_HEADLINE = """\
| 2 ranks, float32 Sum allreduce | Hora | Open MPI (mpi4py) | torch gloo | Open MPI / Hora \
| torch gloo / Hora |
|---|---|---|---|---|---|
| 4 B | 10.0 us | 1.0 us | 80.0 us | 0.10 | 8.00 |
| 4 KiB | 12.0 us | 5.0 us | 200.0 us | 0.42 | 16.67 |
| 1 MiB | 130.0 us | 156.0 us | 520.0 us | 1.20 | 4.00 |
| 64 MiB | 11.00 ms | 22.00 ms | 44.00 ms | 2.00 | 4.00 |
| 200 x 16 KiB step | 1.25 ms | 1.25 ms | 400.00 ms | 1.00 | 320.00 |

Median times on one machine (Test CPU, 2 cores, load average 0.50 at the start), \
2025-01-31 12:00 UTC, from `python bench/allreduce.py --np 2`; ratio = time / Hora's \
(above 1: Hora is faster). More in docs/benchmarks."""


class Site:
    """A results folder, a generated folder, a docs page embedding every generated file and a
    README with the headline markers, all under tmp_path."""

    def __init__(self, tmp_path: Path, doc: dict[str, Any]) -> None:
        self.results = tmp_path / "results"
        self.out = tmp_path / "generated"
        self.index = tmp_path / "index.md"
        self.readme = tmp_path / "README.md"
        self.results.mkdir()
        self.write(doc)
        names = [f"{b}.md" for b in BENCHMARKS if b != "allreduce"]
        self.index.write_text("\n".join(
            ['--8<-- "docs/benchmarks/generated/allreduce-np2.md"',
             "![plot](generated/allreduce-np2.png)",
             *(f'--8<-- "docs/benchmarks/generated/{n}"' for n in names)]) + "\n")
        self.readme.write_text(f"# R\n\n{headline.START}\nold\n{headline.END}\n\nafter\n")

    def write(self, doc: dict[str, Any]) -> None:
        (self.results / "allreduce-np2.json").write_text(json.dumps(doc))

    def report(self, *flags: str) -> int:
        return report.main(["--results", str(self.results), "--out", str(self.out),
                            "--index", str(self.index), "--readme", str(self.readme), *flags])


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return Site(tmp_path, fixture_doc())


def test_report_writes_the_table_footer_plot_and_headline(site: Site) -> None:
    assert site.report() == 0
    page = (site.out / "allreduce-np2.md").read_text()
    assert EXPECTED_TABLE in page
    assert ("Measured 2025-01-31 12:00 UTC with `python bench/allreduce.py --np 2` on Test CPU, "
            "2 cores, 8.0 GiB, Linux 6.1.0; load average 0.50 before, 0.70 after. Versions: "
            "Hora 0.1.0 (abc1234), Python 3.11.7, torch 2.13.0.") in page
    readme = site.readme.read_text()
    assert readme == (f"# R\n\n{headline.START}\n{EXPECTED_HEADLINE}\n{headline.END}\n\n"
                      "after\n")
    assert (site.out / "allreduce-np2.png").read_bytes()[:4] == b"\x89PNG"
    for benchmark in BENCHMARKS[1:]:
        assert "No results yet" in (site.out / f"{benchmark}.md").read_text()
    assert site.report("--check") == 0


def test_headline_names_horovod_when_measured() -> None:
    doc = fixture_doc()
    doc["versions"]["horovod"] = "0.28.1"
    doc["results"].append({"implementation": "horovod", "case": "allreduce", "bytes": 4,
                           "median_s": 20e-6})
    text = headline.headline(doc)
    assert "| Horovod 0.28.1 |" in text.splitlines()[0] + "|"
    assert text.splitlines()[2].endswith("| 20.0 us | 0.10 | 8.00 | 2.00 |")


def test_check_fails_on_stale_missing_and_extra_files(site: Site,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert site.report() == 0
    newer = fixture_doc()
    newer["results"][0]["median_s"] = 9e-6  # hora shm, 4 B
    site.write(newer)
    capsys.readouterr()
    assert site.report("--check") == 1
    out = capsys.readouterr().out
    assert "allreduce-np2.md: stale" in out
    assert "allreduce-np2.png: stale" in out
    assert "headline table is stale" in out
    assert site.report() == 0 and site.report("--check") == 0

    (site.out / "gather-np9.md").write_text("old\n")
    (site.out / "clients.md").unlink()
    capsys.readouterr()
    assert site.report("--check") == 1
    out = capsys.readouterr().out
    assert "gather-np9.md: made from no results file" in out
    assert "clients.md: missing" in out


def test_check_fails_when_the_page_does_not_embed_a_table(site: Site) -> None:
    assert site.report() == 0
    site.index.write_text(site.index.read_text().replace("allreduce-np2.md", "other.md"))
    assert site.report("--check") == 1


def test_readme_without_markers_is_a_note_not_a_failure(site: Site,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    site.readme.write_text("# R\n")
    assert site.report() == 0
    assert site.readme.read_text() == "# R\n"
    assert "no headline table written" in capsys.readouterr().out
    assert site.report("--check") == 0


def test_a_results_file_outside_the_schema_fails_the_report(site: Site) -> None:
    broken = fixture_doc()
    del broken["machine"]["load_average_after"]
    site.write(broken)
    assert site.report("--check") == 1


# ------------------------------------------------------------------------------------------------
# Helpers and schema


def test_sizes_and_tables() -> None:
    assert [sizes.parse_size(s) for s in ("4", "16K", "1M", "1GiB")] == [4, 16384, 1 << 20,
                                                                         1 << 30]
    assert [sizes.format_size(n) for n in (4, 4096, 1536, 64 << 20)] == [
        "4 B", "4 KiB", "1536 B", "64 MiB"]
    assert sizes.powers_of_four(4, 256) == [4, 16, 64, 256]
    assert tables.markdown_table(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|",
                                                               "| 1 | 2 |"]
    assert tables.ratio_cell(3.0, 2.0) == "1.50" and tables.ratio_cell(None, 2.0) == "-"


def test_rounds_merge_into_the_median_of_their_medians() -> None:
    """bench/allreduce.py --rounds K: per implementation, size and step, the median of the K
    rounds' medians, the least of their least times, their iterations added up; an
    implementation that failed in one round is merged from the others, in the order they ran."""
    import allreduce
    from common.timing import merge_rounds

    def run(impl: str, median: float, step: float | None = None) -> dict[str, Any]:
        found: dict[str, Any] = {"impl": impl, "results": [
            {"bytes": 4, "median_s": median, "min_s": median / 2, "iters": 10}]}
        if step is not None:
            found["step"] = {"tensors": 200, "bytes_each": 16384, "median_s": step,
                             "min_s": step / 2, "iters": 3}
        return found

    assert merge_rounds([{"bytes": 4, "median_s": 3.0}, {"bytes": 4, "median_s": 1.0},
                         {"bytes": 4, "median_s": 2.0}]) == {"bytes": 4, "median_s": 2.0}
    rounds = [[run("hora shm", 5.0, 50.0), run("mpi4py", 2.0)],
              [run("hora shm", 9.0, 90.0)],
              [run("gloo", 7.0), run("hora shm", 7.0, 70.0), run("mpi4py", 4.0)]]
    merged = allreduce.merge_runs(rounds)
    assert [m["impl"] for m in merged] == ["hora shm", "mpi4py", "gloo"]
    hora = merged[0]
    assert hora["results"] == [{"bytes": 4, "median_s": 7.0, "min_s": 2.5, "iters": 30}]
    assert hora["step"] == {"tensors": 200, "bytes_each": 16384, "median_s": 70.0,
                            "min_s": 25.0, "iters": 9}
    assert merged[1]["results"][0]["median_s"] == 3.0 and "step" not in merged[1]
    assert merged[2]["results"][0]["iters"] == 10


def test_schema_problems_name_what_is_wrong() -> None:
    assert results.problems(fixture_doc()) == []
    doc = fixture_doc()
    doc["date"] = "yesterday"
    doc["results"][0] = {"case": "allreduce"}
    del doc["versions"]["hora"]
    assert results.problems(doc) == ["date: not UTC ISO 8601 (2025-01-31T12:00:00Z)",
                                      "versions: missing 'hora'",
                                      "results[0]: no 'implementation' and 'case'"]
    doc = copy.deepcopy(fixture_doc())
    doc["extra"] = 1
    assert results.problems(doc) == ["unknown key 'extra'"]


def test_plot_digest_follows_the_data(site: Site) -> None:
    assert site.report() == 0
    data = plots.plots({"allreduce-np2": fixture_doc()})["allreduce-np2.png"]
    assert plots.is_current(site.out / "allreduce-np2.png", data)
    data["series"]["gloo"][0] = (4, 1.0)
    assert not plots.is_current(site.out / "allreduce-np2.png", data)


# ------------------------------------------------------------------------------------------------
# The scripts


SCRIPTS = [f"{b}.py" for b in BENCHMARKS] + ["report.py"]


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=RUN_SECONDS,
                          check=False)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script: str) -> None:
    done = run([sys.executable, str(BENCH / script), "--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
    if script != "report.py":
        assert "--json" in done.stdout


HORARUN = [sys.executable, "-m", "hora.runner"]
# benchmark -> the smallest run that writes a results file (the --json path follows).
SMALLEST = {
    "allreduce": ["--np", "1", "--sizes", "4", "--iters", "1", "--no-peer", "--no-mpi",
                  "--no-tcp"],
    "mpi_allreduce": ["--np", "1", "--sizes", "4", "--iters", "1"],
    "gather": ["--np", "1", "--sizes", "4K", "--iters", "1", "--repeats", "1", "--no-peer"],
    "call_overhead": ["--calls", "5", "--repeats", "1"],
    "wait_cpu": ["--np", "1", "--calls", "10", "--steps", "1", "--cases", "4"],
    "tcp_links": ["--ranks", "2", "--repeats", "1"],
    "torch_synthetic": ["--np", "1", "--num-iters", "1", "--num-batches-per-iter", "1",
                        "--num-warmup-batches", "1", "--repeats", "1", "--batch-size", "2",
                        "--bind-to", "none"],
    "torch_ddp_backends": ["--models", "mlp", "--warmup", "1", "--steps", "1", "--repeats", "1",
                           "--batch-size", "2"],
    "torch_zero": ["--np", "1", "--layers", "1", "--width", "8", "--iters", "1", "--warmup",
                   "1"],
    "powersgd": ["--np", "1", "--width", "16", "--steps", "1", "--batch-size", "2"],
    "torch_import_cost": ["--runs", "1"],
}


@pytest.mark.full_tier  # each runs a benchmark (2-9 s): the quick tier checks the rest
@pytest.mark.parametrize("name", sorted(SMALLEST))  # "benchmark" is pytest-benchmark's
def test_smallest_run_writes_the_schema(name: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if name == "mpi_allreduce":
        pytest.importorskip("mpi4py")
    out = tmp_path / "out.json"
    command = [sys.executable, str(BENCH / f"{name}.py"), *SMALLEST[name],
               "--json", str(out)]
    if name == "torch_ddp_backends":  # started by the user's horarun
        command = [*HORARUN, "-np", "1", *command]
    done = run(command)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert results.problems(doc) == []
    assert doc["benchmark"] == name
    if name == "allreduce":  # Hora through its NumPy API and through hora.torch
        assert {r["implementation"] for r in doc["results"]} == {"hora shm", "hora torch"}
    assert doc["argv"][:2] == ["python", f"bench/{name}.py"] or doc["argv"][:3] == [
        "horarun", "-np", "1"]
    assert f"results: {out}" in done.stdout
    report.pages({"x": doc})  # its table renders


def test_row_builders_of_the_scripts_needing_other_environments() -> None:
    import clients
    import tensorflow_synthetic

    recorder = results.Recorder("tensorflow_synthetic", packages=("numpy",))
    summary = {"step_ms": 20.0, "steps_per_s": 50.0, "img_per_s": 3200.0, "cpu_ms": 18.0}
    rows = tensorflow_synthetic.result_rows({k: summary for k in ("hora", "mwms", "local")},
                                            "mlp")
    settings = {"ranks": 2, "model": "mlp", "batch_size": 32, "steps": 5, "rounds": 1}
    doc = recorder.document(settings, rows)
    assert results.problems(doc) == [] and len(rows) == 3
    report.pages({"tf": doc})

    table_rows = [{"client": "lightning", "launcher": "torchrun", "gloo_ms": 30.0,
                   "hora_ms": 20.0, "gloo_runs_ms": [30.0], "hora_runs_ms": [20.0]}]
    settings = {"ranks": 2, "model": "mlp", "batch_size": 32, "warmup": 5, "steps": 20,
                "repeats": 1}
    doc = results.Recorder("clients").document(settings, clients.result_rows(table_rows))
    assert results.problems(doc) == []
    assert "| lightning | 30.00 ms | 20.00 ms | 1.50 |" in report.pages({"c": doc})["c.md"]


def test_committed_results_match_the_generated_docs() -> None:
    """The repository's own bench/results and docs/benchmarks/generated agree (as CI checks)."""
    done = run([sys.executable, str(BENCH / "report.py"), "--check"])
    assert done.returncode == 0, done.stdout
