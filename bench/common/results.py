"""The results file every benchmark writes: one JSON schema for all of them.

    {"benchmark": "allreduce", "argv": ["python", "bench/allreduce.py", "--np", "2"],
     "date": "2025-01-31T12:00:00Z",
     "machine": {"cpu", "cores", "memory_gib", "kernel", "load_average_before",
                 "load_average_after"},
     "versions": {"hora", "hora_commit", "python", and what the benchmark uses: "torch", ...},
     "settings": {the flags and constants the figures depend on},
     "results": [{"implementation", "case", then the figures: seconds in keys ending in _s}]}

By default a run writes bench/results/<benchmark>[-np<N>].json, the latest measurement, which
bench/report.py turns into the documentation's tables, plots and the README's headline table.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from common.launch import REPO, mpirun_version

RESULTS_DIR = REPO / "bench" / "results"
TOP_KEYS = ("benchmark", "argv", "date", "machine", "versions", "settings", "results")
MACHINE_KEYS = ("cpu", "cores", "memory_gib", "kernel", "load_average_before",
                "load_average_after")
DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def default_path(benchmark: str, ranks: int | None = None) -> Path:
    """bench/results/<benchmark>.json, or <benchmark>-np<ranks>.json for a rank count."""
    return RESULTS_DIR / (benchmark + (f"-np{ranks}" if ranks else "") + ".json")


def json_help(benchmark: str, per_rank_count: bool = True) -> str:
    """The help text of a script's --json flag."""
    suffix = "[-np<N>]" if per_rank_count else ""
    return f"write the results here (default bench/results/{benchmark}{suffix}.json)"


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second: '2025-01-31T12:00:00Z'."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform's guess elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Physical memory in GiB (MemTotal of /proc/meminfo)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine(load_before: list[float]) -> dict[str, Any]:
    """What the figures ran on, with the load average before the run and now."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gib": memory_gib(),
            "kernel": platform.release(), "load_average_before": load_before,
            "load_average_after": load_average()}


def hora_version() -> tuple[str | None, str | None]:
    """(hora.__version__ of the hora this interpreter imports, the repository's commit)."""
    try:
        import hora

        version = getattr(hora, "__version__", None)
    except ImportError:
        version = None
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=False,
                          capture_output=True, text=True)
    return version, (done.stdout.strip() or None) if done.returncode == 0 else None


def versions(packages: Sequence[str]) -> dict[str, str]:
    """Hora, Python and each of ``packages`` that is installed; 'open_mpi' is mpirun's."""
    found: dict[str, str] = {}
    hora, commit = hora_version()
    if hora:
        found["hora"] = hora
    if commit:
        found["hora_commit"] = commit
    found["python"] = platform.python_version()
    for name in packages:
        if name == "open_mpi":
            line = mpirun_version()
            match = re.search(r"Open MPI\)? ([\w.]+)", line or "")
            if match:
                found[name] = match.group(1)
            continue
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def problems(doc: Any) -> list[str]:
    """What makes ``doc`` not a results file of the schema above ([] when it is one)."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    found = [f"missing key '{k}'" for k in TOP_KEYS if k not in doc]
    found += [f"unknown key '{k}'" for k in doc if k not in TOP_KEYS]
    if found:
        return found
    if not isinstance(doc["benchmark"], str) or not doc["benchmark"]:
        found.append("benchmark: not a name")
    if not isinstance(doc["argv"], list) or not all(isinstance(a, str) for a in doc["argv"]):
        found.append("argv: not a list of strings")
    if not isinstance(doc["date"], str) or not DATE.match(doc["date"]):
        found.append("date: not UTC ISO 8601 (2025-01-31T12:00:00Z)")
    machine_doc = doc["machine"] if isinstance(doc["machine"], dict) else {}
    found += [f"machine: missing '{k}'" for k in MACHINE_KEYS if k not in machine_doc]
    versions_doc = doc["versions"] if isinstance(doc["versions"], dict) else {}
    found += [f"versions: missing '{k}'" for k in ("hora", "python") if k not in versions_doc]
    if not isinstance(doc["settings"], dict):
        found.append("settings: not an object")
    rows = doc["results"]
    if not isinstance(rows, list) or not rows:
        found.append("results: not a non-empty list")
    else:
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or not all(
                    isinstance(row.get(k), str) for k in ("implementation", "case")):
                found.append(f"results[{i}]: no 'implementation' and 'case'")
    return found


def load(path: Path) -> dict[str, Any]:
    """A results file, checked against the schema (ValueError naming the file otherwise)."""
    doc = json.loads(Path(path).read_text())
    wrong = problems(doc)
    if wrong:
        raise ValueError(f"{path}: " + "; ".join(wrong))
    return doc


class Recorder:
    """Made when a benchmark starts (the date, the load average, the command line); writes its
    results file when it ends."""

    def __init__(self, benchmark: str, packages: Sequence[str] = (),
                 launcher: Sequence[str] = ()) -> None:
        self.benchmark = benchmark
        self.packages = tuple(packages)
        script = Path(sys.argv[0]).resolve()
        shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
        self.argv = [*launcher, "python", str(shown), *sys.argv[1:]]
        self.date = utc_now()
        self.load_before = load_average()

    def document(self, settings: dict[str, Any], results: list[dict[str, Any]],
                 extra_versions: dict[str, str] | None = None) -> dict[str, Any]:
        """The results file's content; the machine's load average is read now."""
        return {"benchmark": self.benchmark, "argv": self.argv, "date": self.date,
                "machine": machine(self.load_before),
                "versions": {**versions(self.packages), **(extra_versions or {})},
                "settings": settings, "results": results}

    def write(self, path: Path | str | None, settings: dict[str, Any],
              results: list[dict[str, Any]], ranks: int | None = None,
              extra_versions: dict[str, str] | None = None) -> Path:
        """Writes the results file to ``path`` (None: the default for ``ranks``) and says so."""
        target = Path(path) if path else default_path(self.benchmark, ranks)
        doc = self.document(settings, results, extra_versions)
        wrong = problems(doc)
        if wrong:
            raise ValueError(f"{self.benchmark}: results do not fit the schema: {wrong}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"results: {target}")
        return target
