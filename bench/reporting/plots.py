"""The plots of the documentation (matplotlib, Agg): allreduce time against size per
implementation, log-log, one plot per results file.

A plot is redrawn only when what it shows changes: each PNG carries, in its Source text chunk,
a digest of its data and of this file, which ``bench/report.py --check`` compares without
matplotlib and without depending on how a given matplotlib draws."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from common.sizes import format_size
from common.timing import format_time

from reporting.inputs import date_of

PLOTTED = ("allreduce",)
SOURCE_PREFIX = "bench/report.py digest "


def allreduce_series(doc: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """implementation -> [(bytes, median seconds)] of the per-size allreduces."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in doc["results"]:
        if r["case"] == "allreduce":
            series.setdefault(r["implementation"], []).append((r["bytes"], r["median_s"]))
    return series


def plot_data(doc: dict[str, Any]) -> dict[str, Any]:
    """Everything a plot shows: its series, title and note."""
    m = doc["machine"]
    return {"series": allreduce_series(doc),
            "title": f"allreduce, {doc['settings']['ranks']} ranks, float32 Sum in place",
            "note": f"{m['cpu']}, {m['cores']} cores, {date_of(doc)}"}


def digest(data: dict[str, Any]) -> str:
    """sha256 of the plot's data and of this file (a change in either redraws it)."""
    h = hashlib.sha256(json.dumps(data, sort_keys=True).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def plots(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """File name under docs/benchmarks/generated/ -> the data of its plot."""
    return {f"{stem}.png": plot_data(doc) for stem, doc in docs.items()
            if doc["benchmark"] in PLOTTED and allreduce_series(doc)}


def draw(path: Path, data: dict[str, Any]) -> None:
    """Draws one plot into ``path``, its digest in the PNG's Source chunk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    sizes: set[int] = set()
    for name, points in data["series"].items():
        xs, ys = zip(*sorted(points))
        sizes.update(xs)
        ax.loglog(xs, ys, marker="o", markersize=3, label=name)
    ax.xaxis.set_major_locator(FixedLocator(sorted(sizes)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(round(x))))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: format_time(y)))
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    ax.set_xlabel("tensor size per rank")
    ax.set_ylabel("median time per allreduce")
    ax.set_title(data["title"])
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.99, 0.01, data["note"], ha="right", va="bottom", fontsize=7, color="gray")
    fig.tight_layout()
    fig.savefig(path, format="png",
                metadata={"Software": None, "Source": SOURCE_PREFIX + digest(data)})
    plt.close(fig)


def png_source(path: Path) -> str | None:
    """The Source text chunk of a PNG file (None: no file, not a PNG, or no such chunk)."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    at = 8
    while at + 8 <= len(raw):
        length, kind = struct.unpack(">I4s", raw[at:at + 8])
        body = raw[at + 8:at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Source\0"):
            return body[len(b"Source\0"):].decode("latin-1")
        at += 12 + length
    return None


def is_current(path: Path, data: dict[str, Any]) -> bool:
    """Whether the PNG at ``path`` shows ``data`` as this file draws it."""
    return png_source(path) == SOURCE_PREFIX + digest(data)
