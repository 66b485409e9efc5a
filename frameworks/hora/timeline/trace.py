"""Reading a Hora timeline and rebuilding what happened to each tensor.

The engine's rank 0 writes a Chrome-trace JSON array with one record per line (the format is in
docs/timeline.md). :func:`load` reads it, tolerating a file cut mid-record by a crash, and rebuilds:

- per tensor row, one :class:`Occurrence` per time the tensor went through the engine: its
  :class:`Negotiation` (``NEGOTIATE_<KIND>`` span, with a :class:`Tick` per rank as that rank
  reported ready) and its :class:`Op` (``<KIND>`` or ``ERROR`` span, with nested
  :class:`Activity` spans: ``QUEUE``, ``MEMCPY_IN_FUSION_BUFFER``, ``MEMCPY_OUT_FUSION_BUFFER``,
  and the transport's collective such as ``TCP_ALLREDUCE``), and the final ``dtype``/``shape``;
- the ``STEP``, ``CYCLE_START`` and ``TIMELINE_TRUNCATED`` markers of the job row.

``B``/``E`` records are matched per row (pid) as a stack. Sampled traces
(``HORA_TIMELINE_SAMPLE_EVERY``) can hold spans whose begin or end was not recorded; those are
counted as incomplete and left out of the times rather than corrupting the matching.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

NEGOTIATE_PREFIX = "NEGOTIATE_"
OP_KINDS = frozenset({
    "ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "ADASUM", "BARRIER",
    "JOIN", "ERROR", "ADD_PROCESS_SET", "REMOVE_PROCESS_SET",
})
#: Activity categories, in the order reports show them.
CATEGORIES = ("queue", "memcpy_in", "memcpy_out", "communicate")

_BATCH_LINES = 4096


class TraceError(Exception):
    """The file is not a readable Hora (Chrome-trace) timeline."""


def activity_category(name: str) -> str:
    """The category of an activity name: ``queue``, ``memcpy_in``, ``memcpy_out`` or
    ``communicate`` (the transport's collective, e.g. ``TCP_ALLREDUCE`` or ``MPI_ALLGATHER``)."""
    if name == "QUEUE":
        return "queue"
    if name.startswith("MEMCPY_IN"):
        return "memcpy_in"
    if name.startswith("MEMCPY_OUT"):
        return "memcpy_out"
    return "communicate"


@dataclass
class Tick:
    """A rank reporting ready during a negotiation (an ``X`` record named by the set rank)."""

    __slots__ = ("rank", "ts")
    rank: int
    ts: int


@dataclass
class Activity:
    """A span nested in an op; ``end`` is None when the trace never closed it."""

    __slots__ = ("depth", "end", "name", "start")
    name: str
    start: int
    end: int | None
    depth: int  # 1 for a direct child of the op

    @property
    def category(self) -> str:
        """See :func:`activity_category`."""
        return activity_category(self.name)


@dataclass
class Negotiation:
    """A ``NEGOTIATE_<KIND>`` span: from the first request for a tensor to its response."""

    __slots__ = ("end", "kind", "start", "ticks")
    kind: str
    start: int
    end: int | None
    ticks: list[Tick]

    @property
    def duration(self) -> int | None:
        """Microseconds, or None when the span was not closed."""
        return None if self.end is None else self.end - self.start

    def first_tick(self) -> Tick | None:
        """The first rank to report ready (earliest tick; the earlier record on a tie)."""
        return min(self.ticks, key=lambda t: t.ts) if self.ticks else None

    def last_tick(self) -> Tick | None:
        """The last rank to report ready (latest tick; the later record on a tie)."""
        best = None
        for t in self.ticks:
            if best is None or t.ts >= best.ts:
                best = t
        return best

    def lag(self) -> int | None:
        """Microseconds between the first and the last rank reporting ready."""
        first, last = self.first_tick(), self.last_tick()
        return None if first is None or last is None else last.ts - first.ts


@dataclass
class Op:
    """An execution span (``<KIND>`` or ``ERROR``) with its nested activities."""

    __slots__ = ("activities", "dtype", "end", "name", "shape", "start")
    name: str
    start: int
    end: int | None
    activities: list[Activity]
    dtype: str | None
    shape: str | None

    @property
    def duration(self) -> int | None:
        """Microseconds, or None when the span was not closed."""
        return None if self.end is None else self.end - self.start

    def category_times(self) -> dict[str, int]:
        """Microseconds per activity category present in this op. Overlapping or nested spans
        of one category count once; spans left open end with the op."""
        spans: dict[str, list[tuple[int, int]]] = {}
        for a in self.activities:
            end = a.end if a.end is not None else self.end
            if end is None:
                continue
            spans.setdefault(activity_category(a.name), []).append((a.start, end))
        return {cat: iv[0][1] - iv[0][0] if len(iv) == 1 else _union_length(iv)
                for cat, iv in spans.items()}


@dataclass
class Occurrence:
    """One pass of a tensor through the engine: a negotiation, then an op (either may be missing
    from a sampled or cut trace)."""

    __slots__ = ("negotiation", "op", "pid", "step", "tensor")
    tensor: str
    pid: int
    negotiation: Negotiation | None
    op: Op | None
    step: int | None  # the step in which it started, when the trace has STEP markers

    @property
    def kind(self) -> str:
        """The op name (``ALLREDUCE``, ..., ``ERROR``), else the negotiated kind."""
        if self.op is not None:
            return self.op.name
        return self.negotiation.kind if self.negotiation is not None else "UNKNOWN"

    @property
    def start(self) -> int:
        """Timestamp (us) of the first recorded span."""
        if self.negotiation is not None:
            return self.negotiation.start
        assert self.op is not None
        return self.op.start

    @property
    def end(self) -> int | None:
        """Timestamp (us) of the end of the last recorded span, None if it is still open."""
        if self.op is not None:
            return self.op.end
        return self.negotiation.end if self.negotiation is not None else None

    @property
    def complete(self) -> bool:
        """Both the negotiation and the op were recorded and closed."""
        return (self.negotiation is not None and self.negotiation.end is not None
                and self.op is not None and self.op.end is not None)


@dataclass
class StepInfo:
    """A step window: from its STEP marker to the next one (or the end of the trace)."""

    step: int
    start: int
    end: int
    complete: bool  # a later STEP marker closes it
    occurrences: int  # how many tensor passes started in it (0: not sampled)

    @property
    def duration(self) -> int:
        """Microseconds."""
        return self.end - self.start


@dataclass
class Trace:
    """A parsed timeline. Timestamps are microseconds since the timeline started."""

    path: str
    tensors: dict[int, str] = field(default_factory=dict)  # pid -> row name
    occurrences: list[Occurrence] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (step, ts), by step
    cycles: list[int] = field(default_factory=list)
    truncated_at: int | None = None  # ts of TIMELINE_TRUNCATED
    truncated_max_mb: int | None = None
    cut: bool = False  # the file ended mid-record or without "]" (crash) and was repaired
    start_time_since_epoch_us: int | None = None
    first_ts: int | None = None
    last_ts: int | None = None
    records: int = 0
    incomplete_spans: int = 0  # spans whose begin or end is missing
    unmatched_ends: int = 0

    @property
    def ranks(self) -> list[int]:
        """The set ranks that appear in rank-ready ticks."""
        seen = set()
        for occ in self.occurrences:
            if occ.negotiation is not None:
                seen.update(t.rank for t in occ.negotiation.ticks)
        return sorted(seen)

    def step_infos(self) -> list[StepInfo]:
        """The step windows, in order; empty without STEP markers."""
        counts: dict[int, int] = {}
        for occ in self.occurrences:
            if occ.step is not None:
                counts[occ.step] = counts.get(occ.step, 0) + 1
        out = []
        end_of_trace = self.last_ts if self.last_ts is not None else 0
        for i, (step, ts) in enumerate(self.steps):
            nxt = self.steps[i + 1][1] if i + 1 < len(self.steps) else None
            end = nxt if nxt is not None else max(end_of_trace, ts)
            out.append(StepInfo(step, ts, end, nxt is not None, counts.get(step, 0)))
        return out

    def window(self, steps: tuple[int | None, int | None] | None) -> tuple[int, int]:
        """(start, end) timestamps of the steps ``a <= k < b`` (a None bound is open); the whole
        trace for None.

        Raises:
            TraceError: the trace has no STEP markers, or none in the range.
        """
        first = self.first_ts if self.first_ts is not None else 0
        last = self.last_ts if self.last_ts is not None else first
        if steps is None:
            return first, last
        infos = self._steps_in(steps)
        return infos[0].start, infos[-1].end

    def select(self, steps: tuple[int | None, int | None] | None) -> list[Occurrence]:
        """The occurrences that started in steps ``a <= k < b`` (all for None).

        Raises:
            TraceError: the trace has no STEP markers, or none in the range.
        """
        if steps is None:
            return list(self.occurrences)
        infos = self._steps_in(steps)
        wanted = {i.step for i in infos}
        return [o for o in self.occurrences if o.step in wanted]

    def _steps_in(self, steps: tuple[int | None, int | None]) -> list[StepInfo]:
        infos = self.step_infos()
        if not infos:
            raise TraceError("the trace has no STEP markers, so --steps cannot be used")
        lo, hi = steps
        chosen = [i for i in infos
                  if (lo is None or i.step >= lo) and (hi is None or i.step < hi)]
        if not chosen:
            raise TraceError(f"no steps in {format_step_range(steps)}: the trace has steps "
                             f"{infos[0].step}..{infos[-1].step}")
        return chosen


def parse_step_range(text: str) -> tuple[int | None, int | None]:
    """Parses ``a:b`` (steps a <= k < b), ``a:``, ``:b`` or ``a`` (step a alone).

    Raises:
        ValueError: not of that form, or an empty range.
    """
    text = text.strip()
    try:
        if ":" not in text:
            a = int(text)
            return a, a + 1
        lo_text, hi_text = text.split(":", 1)
        lo = int(lo_text) if lo_text.strip() else None
        hi = int(hi_text) if hi_text.strip() else None
    except ValueError:
        raise ValueError(f"bad step range {text!r}: use a:b, a:, :b or a") from None
    if lo is not None and hi is not None and hi <= lo:
        raise ValueError(f"empty step range {text!r}: b must be greater than a")
    return lo, hi


def format_step_range(steps: tuple[int | None, int | None] | None) -> str:
    """The ``a:b`` text of a step range (``all`` for None)."""
    if steps is None:
        return "all"
    lo, hi = steps
    return f"{'' if lo is None else lo}:{'' if hi is None else hi}"


# ----------------------------------------------------------------------------------------------
# Reading records


def _open(path: str) -> BinaryIO:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


class _NotLineLayout(Exception):
    """A record spans several lines, so the one-record-per-line reader cannot be used."""


def _line_records(f: BinaryIO, state: dict[str, bool]) -> Iterator[Any]:
    """Records of the engine's layout ("[" line, then one record per line). Sets state["cut"]
    when the file ends inside a record or without the closing "]"."""
    batch: list[bytes] = []
    closed = False

    def flush() -> Iterator[Any]:
        try:
            yield from json.loads(b"[" + b",".join(batch) + b"]")
            return
        except ValueError:
            pass
        for i, line in enumerate(batch):
            try:
                rec = json.loads(line)
            except ValueError:
                if i == len(batch) - 1 and not f.read().strip():
                    state["cut"] = True  # the crash cut the last record
                    return
                raise _NotLineLayout() from None
            yield rec

    for raw in f:
        line = raw.strip()
        if not line:
            continue
        last = line[-1]
        if last == 0x2C:  # ",": the separator after a record
            line = line[:-1]
        elif last == 0x5D:  # "]": the end of the array
            if line != b"]" and line[-2] != 0x7D:
                raise _NotLineLayout()
            line = line[:-1]
            closed = True
        if line:
            if line[0] != 0x7B:  # "{"
                raise _NotLineLayout()
            batch.append(line)
        if closed:
            break
        if len(batch) >= _BATCH_LINES:
            yield from flush()
            if state["cut"]:
                return
            batch = []
    if batch:
        yield from flush()
    if not closed:
        state["cut"] = True


def _whole_records(data: bytes) -> tuple[list[Any], bool]:
    """Records of any layout: json.loads, else record by record up to the first broken one."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    else:
        if isinstance(doc, list):
            return doc, False
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
            return doc["traceEvents"], False
        raise TraceError("not a Chrome trace: expected a JSON array of records")
    text = data.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    i = _skip(text, 0, " \t\r\n")
    if i >= len(text) or text[i] != "[":
        raise TraceError("not a Chrome trace: the file does not start with '['")
    i += 1
    records: list[Any] = []
    while True:
        i = _skip(text, i, " \t\r\n,")
        if i >= len(text) or text[i] == "]":
            break
        try:
            rec, i = decoder.raw_decode(text, i)
        except ValueError:
            break  # cut mid-record: keep what came before
        records.append(rec)
    return records, True


def _skip(text: str, i: int, chars: str) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _stream_records(path: str, state: dict[str, bool]) -> Iterator[Any]:
    """Records of a file in the engine's layout, streamed; raises _NotLineLayout (possibly after
    yielding some records) when the file has another layout."""
    with _open(path) as f:
        head = f.readline()
        if not head.strip() and not f.read(1):
            raise TraceError("the file is empty (the job may have stopped before the timeline "
                             "was started)")
        if head.strip() != b"[":
            raise _NotLineLayout()
        yield from _line_records(f, state)


def read_records(path: str) -> tuple[list[Any], bool]:
    """All records of a timeline file (plain or gzip), and whether the file was cut.

    A file cut by a crash (mid-record, or without its closing "]") is read up to its last
    complete record, and the second value is then True.

    Raises:
        OSError: the file cannot be read.
        TraceError: the file is empty or is not a JSON array of records.
    """
    state = {"cut": False}
    try:
        return list(_stream_records(path, state)), state["cut"]
    except _NotLineLayout:
        with _open(path) as f:
            return _whole_records(f.read())


# ----------------------------------------------------------------------------------------------
# Rebuilding spans


class _Builder:
    """Turns records, in file order, into a :class:`Trace`."""

    def __init__(self, path: str) -> None:
        self.trace = Trace(path=path)
        # Per pid, the open spans: ("neg", Negotiation) | ("op", Op) | ("act", Activity) |
        # ("orphan", None) for an activity whose op began before the trace (or sample) did.
        self.stacks: dict[int, list[tuple[str, Any]]] = {}
        self.awaiting_op: dict[int, Occurrence] = {}  # negotiated, op not begun yet
        self.last_kind: dict[int, str] = {}

    def feed(self, rec: Any) -> None:
        if type(rec) is not dict:
            return
        t = self.trace
        t.records += 1
        ph = rec.get("ph")
        pid = rec.get("pid", 0)
        if type(pid) is not int:
            return
        name = rec.get("name", "")
        if type(name) is not str:
            name = str(name)
        if ph == "M":
            args = _args(rec)
            if name == "process_name":
                if pid == 0:
                    epoch = args.get("start_time_since_epoch_in_micros")
                    if isinstance(epoch, int):
                        t.start_time_since_epoch_us = epoch
                else:
                    t.tensors[pid] = str(args.get("name", f"pid {pid}"))
            return
        ts = rec.get("ts")
        if type(ts) is not int:
            if not isinstance(ts, (int, float)):
                return
            ts = int(ts)
        if t.first_ts is None or ts < t.first_ts:
            t.first_ts = ts
        if t.last_ts is None or ts > t.last_ts:
            t.last_ts = ts
        if ph == "B":
            if pid != 0:
                self._begin(pid, name, ts)
        elif ph == "E":
            if pid != 0:
                self._end(pid, ts, _args(rec))
        elif ph == "X":
            if pid != 0:
                self._tick(pid, name, ts)
        elif ph in ("i", "I", "R"):
            self._marker(name, ts, _args(rec))

    def _marker(self, name: str, ts: int, args: dict[str, Any]) -> None:
        t = self.trace
        if name == "STEP":
            step = args.get("step")
            if isinstance(step, int):
                t.steps.append((step, ts))
        elif name == "CYCLE_START":
            t.cycles.append(ts)
        elif name == "TIMELINE_TRUNCATED":
            t.truncated_at = ts
            mb = args.get("max_mb")
            t.truncated_max_mb = mb if isinstance(mb, int) else None

    def _row(self, pid: int) -> str:
        return self.trace.tensors.get(pid, f"pid {pid}")

    def _begin(self, pid: int, name: str, ts: int) -> None:
        stack = self.stacks.setdefault(pid, [])
        if name.startswith(NEGOTIATE_PREFIX):
            # One negotiation at a time per tensor: an open one never got its end recorded.
            before = len(stack)
            stack[:] = [e for e in stack if e[0] != "neg"]
            self.trace.incomplete_spans += before - len(stack)
            kind = name[len(NEGOTIATE_PREFIX):]
            neg = Negotiation(kind, ts, None, [])
            occ = Occurrence(self._row(pid), pid, neg, None, None)
            self.trace.occurrences.append(occ)
            self.awaiting_op[pid] = occ
            self.last_kind[pid] = kind
            stack.append(("neg", neg))
            return
        op_index = _innermost(stack, "op")
        if op_index is not None and self._starts_op(pid, name):
            # Ops do not nest: the open one never got its end recorded.
            self.trace.incomplete_spans += sum(1 for e in stack[op_index:] if e[0] != "orphan")
            stack[:] = [e for e in stack if e[0] == "neg"]
            op_index = None
        if op_index is None:
            if (name not in OP_KINDS and name != self.last_kind.get(pid)
                    and _looks_like_activity(name)):
                self.trace.incomplete_spans += 1
                stack.append(("orphan", None))
                return
            op = Op(name, ts, None, [], None, None)
            occ = self.awaiting_op.pop(pid, None)
            if occ is None or occ.op is not None:
                occ = Occurrence(self._row(pid), pid, None, op, None)
                self.trace.occurrences.append(occ)
            else:
                occ.op = op
            stack.append(("op", op))
            return
        op = stack[op_index][1]
        depth = len(stack) - op_index
        if depth > 1:
            depth -= sum(1 for e in stack[op_index + 1:] if e[0] == "neg")
        act = Activity(name, ts, None, depth)
        op.activities.append(act)
        stack.append(("act", act))

    def _starts_op(self, pid: int, name: str) -> bool:
        if name in OP_KINDS:
            return True
        occ = self.awaiting_op.get(pid)
        return (occ is not None and occ.negotiation is not None
                and occ.negotiation.kind == name)

    def _end(self, pid: int, ts: int, args: dict[str, Any]) -> None:
        stack = self.stacks.get(pid)
        if not stack:
            self.trace.unmatched_ends += 1
            return
        if "dtype" in args or "shape" in args:
            # The final E of an op: closes the op and anything left open inside it.
            op_index = _innermost(stack, "op")
            if op_index is None:
                self.trace.unmatched_ends += 1
                stack[:] = [e for e in stack if e[0] == "neg"]
                return
            op = stack[op_index][1]
            for kind, obj in stack[op_index + 1:]:
                if kind == "act" and obj.end is None:
                    self.trace.incomplete_spans += 1
            op.end = ts
            op.dtype = _str_or_none(args.get("dtype"))
            op.shape = _str_or_none(args.get("shape"))
            stack[:] = stack[:op_index] + [e for e in stack[op_index + 1:] if e[0] == "neg"]
            return
        kind, obj = stack.pop()
        if kind != "orphan":
            obj.end = ts

    def _tick(self, pid: int, name: str, ts: int) -> None:
        stack = self.stacks.get(pid, [])
        index = _innermost(stack, "neg")
        if index is None:
            return
        try:
            rank = int(name)
        except ValueError:
            return
        stack[index][1].ticks.append(Tick(rank, ts))

    def finish(self) -> Trace:
        t = self.trace
        for stack in self.stacks.values():
            t.incomplete_spans += sum(1 for kind, _ in stack if kind != "orphan")
        t.steps.sort()
        if t.steps:
            starts = [ts for _, ts in t.steps]
            for occ in t.occurrences:
                i = bisect.bisect_right(starts, occ.start) - 1
                occ.step = t.steps[i][0] if i >= 0 else None
        return t


def _args(rec: dict[str, Any]) -> dict[str, Any]:
    args = rec.get("args")
    return args if isinstance(args, dict) else {}


def _innermost(stack: list[tuple[str, Any]], kind: str) -> int | None:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i][0] == kind:
            return i
    return None


def _looks_like_activity(name: str) -> bool:
    return name == "QUEUE" or name.startswith("MEMCPY_") or "_" in name


def _str_or_none(v: Any) -> str | None:
    return None if v is None else str(v)


def _union_length(spans: list[tuple[int, int]]) -> int:
    total = 0
    cur_start = cur_end = None
    for s, e in sorted(spans):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        elif e > cur_end:
            cur_end = e
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def parse_records(records: Iterable[Any], path: str = "<records>") -> Trace:
    """Rebuilds a :class:`Trace` from timeline records given in file order."""
    builder = _Builder(path)
    for rec in records:
        builder.feed(rec)
    return builder.finish()


def load(path: str) -> Trace:
    """Reads and parses a timeline file (plain or gzip); see :func:`read_records` for files cut
    by a crash. Records are processed as they are read, so large files need little memory
    beyond the rebuilt spans.

    Raises:
        OSError: the file cannot be read.
        TraceError: the file is not a timeline.
    """
    state = {"cut": False}
    try:
        trace = parse_records(_stream_records(path, state), path)
        trace.cut = state["cut"]
    except _NotLineLayout:
        records, cut = read_records(path)
        trace = parse_records(records, path)
        trace.cut = cut
    return trace
