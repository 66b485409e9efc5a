"""``hora-timeline plot``: a Gantt chart of a window of steps (needs matplotlib).

One row per tensor (the ones with the most time in the window), with bars for negotiation, queue,
fusion-buffer copies and the transport's collective, rank-ready ticks inside the negotiation bars
(the last rank to report is marked and labelled), and a dashed line at each STEP marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hora.timeline.trace import Occurrence, Trace, TraceError, format_step_range

COLORS = {
    "negotiate": "#f0a830",
    "queue": "#b9b9b9",
    "memcpy_in": "#8ec5ea",
    "memcpy_out": "#2f7fc1",
    "communicate": "#2e9e5b",
}
LABELS = {
    "negotiate": "negotiate",
    "queue": "queue",
    "memcpy_in": "memcpy in (fusion buffer)",
    "memcpy_out": "memcpy out (fusion buffer)",
    "communicate": "communicate (transport)",
}
_BAR = 0.62  # bar height, in rows
_DEFAULT_STEPS = 3


class MatplotlibMissing(ImportError):
    """matplotlib is not installed."""


@dataclass
class PlotResult:
    """What :func:`plot` drew."""

    path: str
    steps: tuple[int | None, int | None] | None
    description: str  # "steps 1..3", "step 2" or "whole trace"
    tensors: int  # rows drawn
    tensors_in_window: int
    occurrences: int


def default_steps(trace: Trace) -> tuple[int | None, int | None] | None:
    """The window plotted without --steps: three steps from step 1 (step 0 is warm-up), or the
    first recorded step when those were not recorded; None (everything) without STEP markers."""
    infos = trace.step_infos()
    if not infos:
        return None
    recorded = [i.step for i in infos if i.occurrences > 0]
    if not recorded:
        return infos[0].step, infos[0].step + 1
    first = 1 if len(infos) > 1 and infos[1].step == 1 else infos[0].step
    if any(first <= s < first + _DEFAULT_STEPS for s in recorded):
        return first, first + _DEFAULT_STEPS
    later = [s for s in recorded if s >= first] or recorded
    return later[0], later[0] + 1


def _import_pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise MatplotlibMissing(
            "hora-timeline plot needs matplotlib, which is not installed: "
            "pip install matplotlib") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(trace: Trace, output: str, steps: tuple[int | None, int | None] | None = None,
         max_tensors: int = 20, all_steps: bool = False) -> PlotResult:
    """Draws the Gantt chart of the steps ``a <= k < b`` to ``output`` (PNG, or any format
    matplotlib infers from the suffix). Without ``steps`` the window is :func:`default_steps`,
    or the whole trace when ``all_steps`` is set.

    Raises:
        MatplotlibMissing: matplotlib is not installed.
        TraceError: no STEP markers in the range, or nothing to draw.
    """
    plt = _import_pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if steps is None and not all_steps:
        steps = default_steps(trace)
    occs = trace.select(steps)
    if not occs:
        raise TraceError(f"nothing to plot in steps {format_step_range(steps)}")
    w_start, w_end = trace.window(steps)

    busy: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for occ in occs:
        busy[occ.tensor] = busy.get(occ.tensor, 0) + _busy(occ)
        first_seen[occ.tensor] = min(first_seen.get(occ.tensor, occ.start), occ.start)
    chosen = sorted(busy, key=lambda n: (-busy[n], first_seen[n]))[:max(1, max_tensors)]
    chosen.sort(key=lambda n: first_seen[n])
    row_of = {name: i for i, name in enumerate(chosen)}

    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    op_bars: dict[int, list[tuple[float, float]]] = {}
    error_bars: dict[int, list[tuple[float, float]]] = {}
    ticks_x: list[float] = []
    ticks_y: list[float] = []
    last_x: list[float] = []
    last_y: list[float] = []
    labels: list[tuple[float, float, str]] = []
    width_ms = max((w_end - w_start) / 1000.0, 1e-3)

    for occ in occs:
        row = row_of.get(occ.tensor)
        if row is None:
            continue
        neg = occ.negotiation
        if neg is not None:
            end = neg.end if neg.end is not None else w_end
            bars.setdefault((row, "negotiate"), []).append(_span(neg.start, end))
            if neg.ticks:
                last = neg.last_tick()
                for t in neg.ticks:
                    if t is last and len(neg.ticks) > 1:
                        last_x.append(t.ts / 1000.0)
                        last_y.append(row)
                    else:
                        ticks_x.append(t.ts / 1000.0)
                        ticks_y.append(row)
                if (last is not None and len(neg.ticks) > 1
                        and (end - neg.start) / 1000.0 > 0.02 * width_ms):
                    labels.append((last.ts / 1000.0, row, f"r{last.rank}"))
        op = occ.op
        if op is not None:
            end = op.end if op.end is not None else w_end
            target = error_bars if op.name == "ERROR" else op_bars
            target.setdefault(row, []).append(_span(op.start, end))
            for act in sorted(op.activities, key=lambda a: a.depth):
                a_end = act.end if act.end is not None else end
                bars.setdefault((row, act.category), []).append(_span(act.start, a_end))

    fig_h = 2.6 + 0.42 * len(chosen)
    fig, ax = plt.subplots(figsize=(14, fig_h))
    y_lo = -_BAR / 2
    for row, spans in op_bars.items():
        ax.broken_barh(spans, (row + y_lo, _BAR), facecolors="#f4f4f4", edgecolors="#555555",
                       linewidth=0.8, zorder=1)
    for row, spans in error_bars.items():
        ax.broken_barh(spans, (row + y_lo, _BAR), facecolors="#fbe3e3", edgecolors="#c0392b",
                       linewidth=1.2, hatch="//", zorder=1)
    inner = _BAR * 0.8
    for (row, cat), spans in bars.items():
        if cat == "negotiate":
            ax.broken_barh(spans, (row + y_lo, _BAR), facecolors=COLORS[cat], edgecolors="none",
                           zorder=2)
        else:
            ax.broken_barh(spans, (row - inner / 2, inner), facecolors=COLORS[cat],
                           edgecolors="none", zorder=3)
    if ticks_x:
        ax.scatter(ticks_x, ticks_y, marker="|", s=90, color="#222222", linewidths=1.4, zorder=4)
    if last_x:
        ax.scatter(last_x, last_y, marker="|", s=160, color="#c0392b", linewidths=2.4, zorder=5)
    for x, y, text in labels:
        ax.annotate(text, (x, y), xytext=(-4, 0), textcoords="offset points", fontsize=7,
                    fontweight="bold", color="#8e1b10", va="center", ha="right", zorder=6)

    step_infos = [i for i in trace.step_infos() if w_start <= i.start <= w_end]
    for info in step_infos:
        x = info.start / 1000.0
        ax.axvline(x, color="#6c3483", linestyle="--", linewidth=1.0, zorder=0)
        if info.start >= w_end and info.start > w_start:
            continue  # the line closing the window
        took = f" ({info.duration / 1000.0:.1f} ms)" if info.complete else ""
        ax.text(x, 1.0, f" step {info.step}{took}", transform=ax.get_xaxis_transform(),
                fontsize=8, color="#6c3483", va="bottom", ha="left")

    ax.set_yticks(range(len(chosen)))
    ax.set_yticklabels([_short(n) for n in chosen], fontsize=8)
    ax.set_ylim(len(chosen) - 0.5, -0.5)
    pad = 0.01 * width_ms
    ax.set_xlim(w_start / 1000.0 - pad, w_end / 1000.0 + pad)
    ax.set_xlabel("time since the timeline started (ms)")
    ax.grid(axis="x", color="#e6e6e6", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    shown = "" if len(chosen) == len(busy) else f"; {len(chosen)} of {len(busy)} tensors"
    where = _describe(trace, steps)
    ax.set_title(f"Hora timeline: {_short(trace.path, 60)} ({where}{shown})", fontsize=10,
                 pad=16)

    handles: list[Any] = [Patch(facecolor=COLORS[k], label=LABELS[k]) for k in COLORS]
    handles.append(Patch(facecolor="#f4f4f4", edgecolor="#555555", label="op (whole execution)"))
    if error_bars:
        handles.append(Patch(facecolor="#fbe3e3", edgecolor="#c0392b", hatch="//",
                             label="op that failed (ERROR)"))
    handles.append(Line2D([], [], marker="|", linestyle="none", color="#222222", markersize=9,
                          markeredgewidth=1.4, label="rank ready"))
    handles.append(Line2D([], [], marker="|", linestyle="none", color="#c0392b", markersize=12,
                          markeredgewidth=2.4, label="last rank ready (rN)"))
    if step_infos:
        handles.append(Line2D([], [], color="#6c3483", linestyle="--", label="STEP marker"))
    fig.tight_layout()
    axes_inches = ax.get_position().height * fig_h
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.5 / axes_inches),
              ncol=5, fontsize=8, frameon=False)
    fig.savefig(output, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return PlotResult(output, steps, where, len(chosen), len(busy), len(occs))


def _describe(trace: Trace, steps: tuple[int | None, int | None] | None) -> str:
    """How the window reads in titles: steps 1..3, step 2, or whole trace."""
    if steps is None:
        return "whole trace"
    lo, hi = steps
    present = [i.step for i in trace.step_infos()
               if (lo is None or i.step >= lo) and (hi is None or i.step < hi)]
    if len(present) == 1:
        return f"step {present[0]}"
    return f"steps {present[0]}..{present[-1]}"


def _busy(occ: Occurrence) -> int:
    total = 0
    for span in (occ.negotiation, occ.op):
        if span is not None and span.duration is not None:
            total += span.duration
    return total


def _span(start: int, end: int) -> tuple[float, float]:
    return start / 1000.0, max(end - start, 0) / 1000.0


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3):]
