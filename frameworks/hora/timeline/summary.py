"""``hora-timeline summary``: where the time went, per op type, per tensor, per step and per rank.

:func:`summarize` computes a JSON-ready dict (``hora-timeline summary --json`` prints it);
:func:`format_summary` renders it as plain aligned text tables. All times are milliseconds since
the timeline started. The dict's keys:

- ``file``, ``cut`` (the file was not closed and was read up to its last complete record),
  ``truncated`` (``{at_ms, max_mb}`` when the size cap stopped recording, else null);
- ``window``: ``{steps, start_ms, end_ms, duration_ms}``;
- ``counts``: tensors, occurrences (tensor operations), errors, incomplete, ranks, cycles;
- ``steps``: null without STEP markers, else ``{count, sampled, time: {count, mean_ms,
  median_ms, min_ms, max_ms}, order: "chronological" | "slowest", rows: [{step, start_ms,
  duration_ms, complete, sampled, tensors}]}``;
- ``by_op`` / ``by_tensor``: rows with ``count``, ``errors``, ``incomplete``, and for each of
  ``negotiate``, ``queue``, ``memcpy_in``, ``memcpy_out``, ``communicate`` and ``execution``
  (the whole op span) ``{count, total_ms, mean_ms}``; tensor rows also have op, dtype, shape;
- ``top_waiters``: per tensor, its negotiations (count, total, mean, max), the rank most often
  last to report ready (``last_ready_rank``, ``last_ready_count`` of ``with_ticks``), how long
  after the first rank it reported (``lag_mean_ms``, ``lag_max_ms``) and its ``worst``
  negotiation;
- ``ranks``: per rank, ``reports``, times ``first`` and ``last``, and ``after_first_mean_ms`` /
  ``after_first_max_ms``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from hora.timeline.trace import CATEGORIES, Occurrence, Trace, format_step_range

#: The columns of the time tables: negotiation, then the activity categories.
PHASES = ("negotiate",) + CATEGORIES
PHASE_TITLES = {
    "negotiate": "negotiate",
    "queue": "queue",
    "memcpy_in": "memcpy in",
    "memcpy_out": "memcpy out",
    "communicate": "communicate",
}
_NAME_WIDTH = 40
_ALL_STEPS_SHOWN = 20


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000.0, 3)


class _Acc:
    """Totals of one group (an op type or a tensor)."""

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.incomplete = 0
        self.totals = {p: 0 for p in PHASES}
        self.counts = {p: 0 for p in PHASES}
        self.op_total = 0
        self.op_count = 0

    def add(self, occ: Occurrence) -> None:
        self.count += 1
        if not occ.complete:
            self.incomplete += 1
        neg = occ.negotiation
        if neg is not None and neg.duration is not None:
            self.totals["negotiate"] += neg.duration
            self.counts["negotiate"] += 1
        op = occ.op
        if op is not None and op.duration is not None:
            if op.name == "ERROR":
                self.errors += 1
            self.op_total += op.duration
            self.op_count += 1
            for cat, us in op.category_times().items():
                self.totals[cat] += us
                self.counts[cat] += 1

    @property
    def busy(self) -> int:
        return self.totals["negotiate"] + self.op_total

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        for p in PHASES:
            n = self.counts[p]
            out[p] = {"count": n, "total_ms": _ms(self.totals[p]),
                      "mean_ms": _ms(self.totals[p] / n) if n else None}
        out["execution"] = {"count": self.op_count, "total_ms": _ms(self.op_total),
                     "mean_ms": _ms(self.op_total / self.op_count) if self.op_count else None}
        out["errors"] = self.errors
        out["incomplete"] = self.incomplete
        return out


def _stats(values: Sequence[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"count": len(values), "mean_ms": _ms(statistics.fmean(values)),
            "median_ms": _ms(statistics.median(values)), "min_ms": _ms(min(values)),
            "max_ms": _ms(max(values))}


def summarize(trace: Trace, top: int = 10,
              steps: tuple[int | None, int | None] | None = None) -> dict[str, Any]:
    """The summary of a trace (or of the steps ``a <= k < b``) as a JSON-ready dict.

    ``top`` limits the per-tensor, top-waiter and slowest-step lists.

    Raises:
        TraceError: ``steps`` was given but the trace has no STEP markers in that range.
    """
    occs = trace.select(steps)
    start, end = trace.window(steps)

    by_op: dict[str, _Acc] = {}
    by_tensor: dict[str, _Acc] = {}
    tensor_info: dict[str, dict[str, Any]] = {}
    for occ in occs:
        by_op.setdefault(occ.kind, _Acc()).add(occ)
        by_tensor.setdefault(occ.tensor, _Acc()).add(occ)
        info = tensor_info.setdefault(occ.tensor, {"op": occ.kind, "dtype": None, "shape": None})
        if occ.op is not None and occ.op.name != "ERROR":
            info["op"] = occ.op.name
            if occ.op.dtype is not None:
                info["dtype"], info["shape"] = occ.op.dtype, occ.op.shape

    op_rows = []
    for kind, acc in sorted(by_op.items(), key=lambda kv: (-kv[1].busy, kv[0])):
        op_rows.append({"op": kind, **acc.as_dict()})
    tensor_order = sorted(by_tensor.items(), key=lambda kv: (-kv[1].busy, kv[0]))
    tensor_rows = []
    for name, acc in tensor_order[:top]:
        tensor_rows.append({"tensor": name, **tensor_info[name], **acc.as_dict()})

    return {
        "file": trace.path,
        "cut": trace.cut,
        "truncated": None if trace.truncated_at is None else {
            "at_ms": _ms(trace.truncated_at), "max_mb": trace.truncated_max_mb},
        "window": {"steps": None if steps is None else format_step_range(steps),
                   "start_ms": _ms(start), "end_ms": _ms(end),
                   "duration_ms": _ms(max(0, end - start))},
        "counts": {
            "tensors": len(by_tensor),
            "occurrences": len(occs),
            "errors": sum(a.errors for a in by_op.values()),
            "incomplete": sum(a.incomplete for a in by_op.values()),
            "ranks": len(trace.ranks),
            "cycles": sum(1 for ts in trace.cycles if start <= ts <= end),
        },
        "steps": _steps(trace, steps, top),
        "by_op": op_rows,
        "by_tensor": tensor_rows,
        "tensors_not_shown": max(0, len(tensor_order) - top),
        "top_waiters": _waiters(occs, top),
        "ranks": _ranks(occs),
    }


def _steps(trace: Trace, steps: tuple[int | None, int | None] | None,
           top: int) -> dict[str, Any] | None:
    infos = trace.step_infos()
    if not infos:
        return None
    if steps is not None:
        lo, hi = steps
        infos = [i for i in infos if (lo is None or i.step >= lo) and (hi is None or i.step < hi)]
    rows = [{"step": i.step, "start_ms": _ms(i.start), "duration_ms": _ms(i.duration),
             "complete": i.complete, "sampled": i.occurrences > 0, "tensors": i.occurrences}
            for i in infos]
    timed = [i.duration for i in infos if i.complete and i.occurrences > 0]
    shown = rows
    order = "chronological"
    if len(rows) > max(top, _ALL_STEPS_SHOWN):
        shown = sorted((r for r in rows if r["complete"] and r["sampled"]),
                       key=lambda r: -r["duration_ms"])[:top]
        order = "slowest"
    return {"count": len(rows), "sampled": sum(1 for r in rows if r["sampled"]),
            "time": _stats(timed), "order": order, "rows": shown}


def _waiters(occs: Sequence[Occurrence], top: int) -> list[dict[str, Any]]:
    per: dict[str, dict[str, Any]] = {}
    for occ in occs:
        neg = occ.negotiation
        if neg is None or neg.duration is None:
            continue
        w = per.setdefault(occ.tensor, {"durations": [], "lags": [], "last": {}, "worst": None})
        w["durations"].append(neg.duration)
        last, lag = neg.last_tick(), neg.lag()
        if last is not None and lag is not None and len(neg.ticks) > 1:
            w["lags"].append(lag)
            w["last"][last.rank] = w["last"].get(last.rank, 0) + 1
        if w["worst"] is None or neg.duration > w["worst"][0].duration:
            w["worst"] = (neg, occ.step)
    rows = []
    for name, w in per.items():
        durations, lags = w["durations"], w["lags"]
        last_rank = last_count = None
        if w["last"]:
            last_rank, last_count = max(w["last"].items(), key=lambda kv: (kv[1], -kv[0]))
        neg, step = w["worst"]
        worst_last = neg.last_tick() if len(neg.ticks) > 1 else None
        rows.append({
            "tensor": name,
            "negotiations": len(durations),
            "negotiate_total_ms": _ms(sum(durations)),
            "negotiate_mean_ms": _ms(statistics.fmean(durations)),
            "negotiate_max_ms": _ms(max(durations)),
            "last_ready_rank": last_rank,
            "last_ready_count": last_count,
            "with_ticks": len(lags),
            "lag_mean_ms": _ms(statistics.fmean(lags)) if lags else None,
            "lag_max_ms": _ms(max(lags)) if lags else None,
            "worst": {"step": step, "start_ms": _ms(neg.start), "negotiate_ms": _ms(neg.duration),
                      "last_rank": None if worst_last is None else worst_last.rank,
                      "lag_ms": _ms(neg.lag()) if worst_last is not None else None},
        })
    rows.sort(key=lambda r: (-r["negotiate_total_ms"], r["tensor"]))
    return rows[:top]


def _ranks(occs: Sequence[Occurrence]) -> list[dict[str, Any]]:
    per: dict[int, dict[str, Any]] = {}
    for occ in occs:
        neg = occ.negotiation
        if neg is None or not neg.ticks:
            continue
        first, last = neg.first_tick(), neg.last_tick()
        assert first is not None and last is not None
        for t in neg.ticks:
            r = per.setdefault(t.rank, {"after": [], "last": 0, "first": 0})
            r["after"].append(t.ts - first.ts)
        if len(neg.ticks) > 1:
            per[last.rank]["last"] += 1
            per[first.rank]["first"] += 1
    rows = []
    for rank, r in sorted(per.items()):
        rows.append({"rank": rank, "reports": len(r["after"]), "first": r["first"],
                     "last": r["last"], "after_first_mean_ms": _ms(statistics.fmean(r["after"])),
                     "after_first_max_ms": _ms(max(r["after"]))})
    return rows


# ----------------------------------------------------------------------------------------------
# Text


def _short(name: str, width: int = _NAME_WIDTH) -> str:
    """Long tensor names keep their end, which tells them apart."""
    return name if len(name) <= width else "..." + name[-(width - 3):]


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _table(headers: list[str], rows: list[list[str]], left: int = 1,
           groups: list[tuple[str, int]] | None = None, indent: str = "  ",
           left_cols: Sequence[int] = ()) -> list[str]:
    """Aligned columns: the first ``left`` columns and those in ``left_cols`` left-aligned, the
    rest right-aligned. ``groups`` adds a line of titles, each spanning the given number of
    columns."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    if groups:
        # Widen the columns under a group title that does not fit.
        col = 0
        for title, span in groups:
            cols = list(range(col, col + span))
            have = sum(widths[i] for i in cols) + 2 * (span - 1)
            if title and have < len(title):
                widths[cols[-1]] += len(title) - have
            col += span

    def line(cells: list[str]) -> str:
        parts = [c.ljust(w) if i < left or i in left_cols else c.rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths))]
        return (indent + "  ".join(parts)).rstrip()

    out = []
    if groups:
        parts = []
        col = 0
        for title, span in groups:
            w = sum(widths[col:col + span]) + 2 * (span - 1)
            parts.append(title.center(w) if title else " " * w)
            col += span
        out.append((indent + "  ".join(parts)).rstrip())
    out.append(line(headers))
    out.append(line(["-" * w for w in widths]))
    out.extend(line(r) for r in rows)
    return out


def _time_table(first: list[str], rows: list[dict[str, Any]], key: str,
                extra: Sequence[str] = ()) -> list[str]:
    headers = list(first) + ["count"]
    groups: list[tuple[str, int]] = [("", len(first) + 1)]
    for p in ("negotiate", "queue"):
        headers += ["total", "mean"]
        groups.append((PHASE_TITLES[p], 2))
    headers += ["in", "out"]
    groups.append(("memcpy", 2))
    headers += ["total", "mean", "op total"]
    groups += [(PHASE_TITLES["communicate"], 2), ("", 1)]
    body = []
    for r in rows:
        cells = [_short(str(r[key]))] + [str(r[e] if r[e] is not None else "-") for e in extra]
        cells.append(str(r["count"]))

        def total(p: str, row: dict[str, Any] = r) -> str:
            return _num(row[p]["total_ms"] if row[p]["count"] else None)

        for p in ("negotiate", "queue"):
            cells += [total(p), _num(r[p]["mean_ms"])]
        cells += [total("memcpy_in"), total("memcpy_out")]
        cells += [total("communicate"), _num(r["communicate"]["mean_ms"])]
        cells.append(_num(r["execution"]["total_ms"]))
        body.append(cells)
    return _table(headers, body, left=len(first), groups=groups)


def format_summary(summary: dict[str, Any]) -> str:
    """Renders :func:`summarize`'s dict as plain text tables."""
    s = summary
    c = s["counts"]
    w = s["window"]
    out = [f"Hora timeline {s['file']}"]
    where = "whole trace" if w["steps"] is None else f"steps {w['steps']}"
    out.append(f"  {where}: {_num(w['duration_ms'])} ms ({_num(w['start_ms'])} .. "
               f"{_num(w['end_ms'])} ms since the timeline started)")
    out.append(f"  {c['tensors']} tensors, {c['occurrences']} tensor operations, "
               f"{c['ranks']} ranks, {_plural(c['errors'], 'error')}"
               + (f", {c['cycles']} cycles" if c["cycles"] else ""))
    if c["incomplete"]:
        out.append(f"  note: {c['incomplete']} tensor operations were recorded only in part "
                   "(sampling, a crash, or the size cap); their missing parts count as 0")
    if s["cut"]:
        out.append("  note: the file was not closed (the job stopped while writing it?); it was "
                   "read up to its last complete record")
    if s["truncated"] is not None:
        t = s["truncated"]
        cap = "" if t["max_mb"] is None else f" (HORA_TIMELINE_MAX_MB={t['max_mb']})"
        out.append(f"  note: recording stopped at {_num(t['at_ms'])} ms: the file reached its size "
                   f"cap{cap}")
    out.append("")

    st = s["steps"]
    if st is not None:
        out.append(f"Steps ({st['count']}, {st['sampled']} recorded; times in ms)")
        if st["time"] is not None:
            tm = st["time"]
            out.append(f"  step time: mean {_num(tm['mean_ms'])}, median {_num(tm['median_ms'])}, "
                       f"min {_num(tm['min_ms'])}, max {_num(tm['max_ms'])} "
                       f"(over {tm['count']} complete recorded steps)")
        if st["order"] == "slowest":
            out.append(f"  the {len(st['rows'])} slowest steps:")
        rows = []
        for r in st["rows"]:
            note = "" if r["sampled"] else "not recorded (sampling)"
            if r["sampled"] and not r["complete"]:
                note = "last step: runs to the end of the trace"
            rows.append([str(r["step"]), _num(r["start_ms"]), _num(r["duration_ms"]),
                         str(r["tensors"]), note])
        out += _table(["step", "start", "duration", "tensor ops", "note"], rows, left=1,
                      left_cols=(4,))
        out.append("")

    out.append("Time by op type (ms; memcpy: totals; mean: per operation that had that phase)")
    out += _time_table(["op"], s["by_op"], "op")
    out.append("")
    shown = len(s["by_tensor"])
    total = shown + s["tensors_not_shown"]
    out.append(f"Time by tensor (ms; {shown} of {total} tensors, most time first)")
    out += _time_table(["tensor", "op", "dtype", "shape"], s["by_tensor"], "tensor",
                       extra=("op", "dtype", "shape"))
    if s["tensors_not_shown"]:
        out.append(f"  ... {s['tensors_not_shown']} more (use --top)")
    out.append("")

    out.append("Top waiters (tensors with the longest negotiation; \"last ready\" is the rank "
               "the others waited for,")
    out.append("  \"lag\" how long after the first rank it reported ready; ms)")
    rows = []
    for r in s["top_waiters"]:
        last = "-"
        if r["last_ready_rank"] is not None:
            last = f"{r['last_ready_rank']} ({r['last_ready_count']}/{r['with_ticks']})"
        rows.append([_short(r["tensor"]), str(r["negotiations"]), _num(r["negotiate_total_ms"]),
                     _num(r["negotiate_mean_ms"]), _num(r["negotiate_max_ms"]), last,
                     _num(r["lag_mean_ms"]), _num(r["lag_max_ms"])])
    out += _table(["tensor", "count", "total", "mean", "max", "rank (times)", "mean lag",
                   "max lag"], rows, left=1, left_cols=(5,),
                  groups=[("", 2), ("negotiate", 3), ("last ready", 3)])
    out.append("")

    out.append("Ranks (first/last: times it reported ready first/last; lag: ms after the first "
               "rank)")
    rows = [[str(r["rank"]), str(r["reports"]), str(r["first"]), str(r["last"]),
             _num(r["after_first_mean_ms"]), _num(r["after_first_max_ms"])] for r in s["ranks"]]
    out += _table(["rank", "reports", "first", "last", "mean lag", "max lag"], rows, left=0)
    slow = _slowest_rank(s["ranks"])
    if slow is not None:
        out.append(f"  rank {slow['rank']} reported ready last {slow['last']} times out of "
                   f"{slow['reports']}, {_num(slow['after_first_mean_ms'])} ms after the first "
                   "rank on average: the others wait for it")
    return "\n".join(out) + "\n"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _slowest_rank(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: (r["after_first_mean_ms"] or 0.0, r["last"]))
    if not slow["last"] or not slow["after_first_mean_ms"]:
        return None
    return slow
