"""The results files bench/report.py reads, and the lines every generated table ends with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.results import load

# Every benchmark script of bench/, in the order the documentation lists them.
BENCHMARKS = ("allreduce", "mpi_allreduce", "gather", "jax_allreduce", "multihost",
              "call_overhead", "wait_cpu", "tcp_links", "torch_synthetic", "torch_ddp_backends", "torch_zero",
              "powersgd", "torch_import_cost", "tensorflow_synthetic", "clients", "scale")

VERSION_NAMES = {"hora": "Hora", "python": "Python", "torch": "torch", "numpy": "NumPy",
                 "mpi4py": "mpi4py", "open_mpi": "Open MPI", "horovod": "Horovod",
                 "tensorflow": "TensorFlow", "tensorflow-cpu": "TensorFlow (CPU)",
                 "keras": "Keras"}


def load_all(results_dir: Path) -> dict[str, dict[str, Any]]:
    """Results file stem ('allreduce-np2') -> its content, each checked against the schema."""
    return {path.stem: load(path) for path in sorted(Path(results_dir).glob("*.json"))}


def date_of(doc: dict[str, Any]) -> str:
    """'2025-01-31 12:00 UTC' from the ISO date."""
    return doc["date"][:16].replace("T", " ") + " UTC"


def command_of(doc: dict[str, Any]) -> str:
    """The command line that made the results."""
    return " ".join(doc["argv"])


def versions_line(doc: dict[str, Any]) -> str:
    """'Hora 0.1.0 (a9fe775), Python 3.11.7, torch 2.13.0, ...'."""
    found = dict(doc["versions"])
    commit = found.pop("hora_commit", None)
    parts = []
    for key, version in found.items():
        text = f"{VERSION_NAMES.get(key, key)} {version}"
        parts.append(text + (f" ({commit})" if key == "hora" and commit else ""))
    return ", ".join(parts)


def machine_line(doc: dict[str, Any]) -> str:
    """'AMD EPYC, 2 cores, 23.5 GiB, Linux 6.1; load average 1.1 before, 1.3 after'."""
    m = doc["machine"]
    before, after = m["load_average_before"][0], m["load_average_after"][0]
    return (f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}; "
            f"load average {before:.2f} before, {after:.2f} after")


def footer(doc: dict[str, Any]) -> str:
    """The paragraph under a table: when, how, on what and with which versions."""
    return (f"Measured {date_of(doc)} with `{command_of(doc)}` on {machine_line(doc)}. "
            f"Versions: {versions_line(doc)}.")
