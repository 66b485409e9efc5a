"""hora-timeline: parsing a synthetic timeline written in the engine's exact format, the summary
(text and --json), files cut by a crash, other layouts, and the Gantt plot."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hora.timeline import load, parse_records, parse_step_range, summarize
from hora.timeline.__main__ import main

# ------------------------------------------------------------------------------------------------
# A synthetic trace, formatted exactly as core/timeline writes it.
#
# 2 ranks, 3 steps of 100 ms. Step k starts at T = 100 + 100000 k (us). Rank 1 is slow: it
# reports its gradients ready d = 20 + 5k ms after the step starts.
#   grad/w1  ALLREDUCE float32 [256, 128]: negotiation T .. T+d+0.1 ms, ticks r0 @T, r1 @T+d
#   grad/b1  ALLREDUCE float32 [128]:      negotiation T+1 ms .. T+d+0.1 ms, r0 @T+1, r1 @T+d
#     fused op from S = T+d+0.1 ms: QUEUE 0.5, MEMCPY_IN 0.4, TCP_ALLREDUCE 8.0, MEMCPY_OUT 0.4
#   emb      ALLGATHER float32 [10, 4]:    negotiation T+50 .. T+52.05 ms, r1 @T+50, r0 @T+52
#     op from T+52.05: QUEUE 0.05, TCP_ALLGATHER 3.0

STEP_US = 100_000
W1, B1, EMB = "grad/w1", "grad/b1", "emb"


def step_start(k: int) -> int:
    return 100 + STEP_US * k


def delay(k: int) -> int:
    return 20_000 + 5_000 * k


def make_events(steps: int = 3, cycles: bool = True) -> list[tuple]:
    """(ts, row, ph, name, args) in the order the engine pushes them; row "" is the job row."""
    ev: list[tuple] = []
    for k in range(steps):
        t, d = step_start(k), delay(k)
        ev.append((t, "", "i", "STEP", {"step": k}))
        if cycles:
            ev.append((t, "", "i", "CYCLE_START", None))
        ev += [(t, W1, "B", "NEGOTIATE_ALLREDUCE", None), (t, W1, "X", "0", None)]
        ev += [(t + 1000, B1, "B", "NEGOTIATE_ALLREDUCE", None), (t + 1000, B1, "X", "0", None)]
        ev += [(t + d, W1, "X", "1", None), (t + d, B1, "X", "1", None)]
        s = t + d + 100
        if cycles:
            ev.append((s, "", "i", "CYCLE_START", None))
        ev += [(s, W1, "E", "", None), (s, B1, "E", "", None)]
        for row in (W1, B1):
            ev.append((s, row, "B", "ALLREDUCE", None))
        for name, begin, end in (("QUEUE", 0, 500), ("MEMCPY_IN_FUSION_BUFFER", 500, 900),
                                 ("TCP_ALLREDUCE", 900, 8900),
                                 ("MEMCPY_OUT_FUSION_BUFFER", 8900, 9300)):
            for row in (W1, B1):
                ev.append((s + begin, row, "B", name, None))
            for row in (W1, B1):
                ev.append((s + end, row, "E", "", None))
        ev.append((s + 9300, W1, "E", "", {"dtype": "float32", "shape": "[256, 128]"}))
        ev.append((s + 9300, B1, "E", "", {"dtype": "float32", "shape": "[128]"}))
        g = t + 50_000
        ev += [(g, EMB, "B", "NEGOTIATE_ALLGATHER", None), (g, EMB, "X", "1", None),
               (g + 2000, EMB, "X", "0", None), (g + 2050, EMB, "E", "", None),
               (g + 2050, EMB, "B", "ALLGATHER", None), (g + 2050, EMB, "B", "QUEUE", None),
               (g + 2100, EMB, "E", "", None), (g + 2100, EMB, "B", "TCP_ALLGATHER", None),
               (g + 5100, EMB, "E", "", None),
               (g + 5100, EMB, "E", "", {"dtype": "float32", "shape": "[10, 4]"})]
    return ev


def records(events: list[tuple]) -> list[str]:
    """The JSON text of each record, with the metadata rows the writer adds."""
    out = [
        ('{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"hora",'
         '"start_time_since_epoch_in_micros":1700000000000000}}'),
        '{"name":"process_sort_index","ph":"M","pid":0,"tid":0,"args":{"sort_index":0}}',
    ]
    pids: dict[str, int] = {}
    for ts, row, ph, name, args in events:
        pid = 0
        if row:
            if row not in pids:
                pids[row] = len(pids) + 1
                p = pids[row]
                out.append(json.dumps({"name": "process_name", "ph": "M", "pid": p, "tid": 0,
                                       "args": {"name": row}}, separators=(",", ":")))
                out.append(json.dumps({"name": "process_sort_index", "ph": "M", "pid": p,
                                       "tid": 0, "args": {"sort_index": p}},
                                      separators=(",", ":")))
            pid = pids[row]
        rec: dict = {"ph": ph}
        if name or ph != "E":
            rec["name"] = name
        rec["ts"] = ts
        if ph == "X":
            rec["dur"] = 0
        if ph == "i":
            rec["s"] = "g"
        rec["pid"] = pid
        rec["tid"] = 0
        if args is not None:
            rec["args"] = args
        out.append(json.dumps(rec, separators=(",", ":")))
    return out


def engine_text(recs: list[str]) -> str:
    return "[\n" + ",\n".join(recs) + "]"


@pytest.fixture
def trace_path(tmp_path):
    path = tmp_path / "timeline.json"
    path.write_text(engine_text(records(make_events())))
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def by(rows: list[dict], key: str, value: str) -> dict:
    return next(r for r in rows if r[key] == value)


# ------------------------------------------------------------------------------------------------
# Parsing


def test_the_synthetic_trace_is_valid_json(trace_path):
    assert len(json.loads(Path(trace_path).read_text())) == len(records(make_events()))


def test_parse_rebuilds_each_tensor(trace_path):
    t = load(trace_path)
    assert not t.cut and t.truncated_at is None
    assert t.incomplete_spans == 0 and t.unmatched_ends == 0
    assert t.tensors == {1: W1, 2: B1, 3: EMB}
    assert t.start_time_since_epoch_us == 1700000000000000
    assert t.steps == [(0, 100), (1, 100_100), (2, 200_100)]
    assert len(t.cycles) == 6
    assert t.ranks == [0, 1]
    assert len(t.occurrences) == 9
    assert [o.step for o in t.occurrences if o.tensor == W1] == [0, 1, 2]

    w1 = [o for o in t.occurrences if o.tensor == W1][1]  # step 1
    assert w1.complete and w1.kind == "ALLREDUCE"
    neg = w1.negotiation
    assert (neg.kind, neg.start, neg.end) == ("ALLREDUCE", 100_100, 100_100 + 25_100)
    assert [(k.rank, k.ts) for k in neg.ticks] == [(0, 100_100), (1, 125_100)]
    assert neg.last_tick().rank == 1 and neg.lag() == 25_000
    op = w1.op
    assert (op.name, op.start, op.end) == ("ALLREDUCE", 125_200, 134_500)
    assert (op.dtype, op.shape) == ("float32", "[256, 128]")
    assert [(a.name, a.start, a.end, a.depth) for a in op.activities] == [
        ("QUEUE", 125_200, 125_700, 1),
        ("MEMCPY_IN_FUSION_BUFFER", 125_700, 126_100, 1),
        ("TCP_ALLREDUCE", 126_100, 134_100, 1),
        ("MEMCPY_OUT_FUSION_BUFFER", 134_100, 134_500, 1),
    ]
    assert op.category_times() == {"queue": 500, "memcpy_in": 400, "communicate": 8000,
                                   "memcpy_out": 400}

    emb = next(o for o in t.occurrences if o.tensor == EMB)
    assert emb.kind == "ALLGATHER" and emb.negotiation.last_tick().rank == 0
    assert emb.op.shape == "[10, 4]"


def test_nested_activities_and_unmatched_records():
    recs = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "x"}},
        # An activity whose op began before the recorded window, then the op's end.
        {"ph": "B", "name": "TCP_ALLREDUCE", "ts": 1, "pid": 1, "tid": 0},
        {"ph": "E", "ts": 2, "pid": 1, "tid": 0},
        {"ph": "E", "ts": 3, "pid": 1, "tid": 0, "args": {"dtype": "int32", "shape": "[1]"}},
        {"ph": "E", "ts": 4, "pid": 1, "tid": 0},
        # A negotiation whose end was not recorded, then a full pass with a nested activity.
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1, "tid": 0},
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 20, "pid": 1, "tid": 0},
        {"ph": "X", "name": "0", "ts": 21, "dur": 0, "pid": 1, "tid": 0},
        {"ph": "E", "ts": 30, "pid": 1, "tid": 0},
        {"ph": "B", "name": "ALLREDUCE", "ts": 30, "pid": 1, "tid": 0},
        {"ph": "B", "name": "TCP_ALLREDUCE", "ts": 31, "pid": 1, "tid": 0},
        {"ph": "B", "name": "MEMCPY_IN_FUSION_BUFFER", "ts": 32, "pid": 1, "tid": 0},
        {"ph": "E", "ts": 33, "pid": 1, "tid": 0},
        {"ph": "E", "ts": 38, "pid": 1, "tid": 0},
        {"ph": "E", "ts": 40, "pid": 1, "tid": 0, "args": {"dtype": "int32", "shape": "[2]"}},
        # An op still running when the trace ends.
        {"ph": "B", "name": "ALLREDUCE", "ts": 50, "pid": 1, "tid": 0},
    ]
    t = parse_records(recs)
    assert t.unmatched_ends == 2
    assert t.incomplete_spans == 3  # the orphan activity, the first negotiation, the last op
    assert len(t.occurrences) == 3
    first, full, running = t.occurrences
    assert first.negotiation.end is None and first.op is None
    assert full.complete and full.negotiation.start == 20 and full.op.shape == "[2]"
    assert [(a.name, a.depth) for a in full.op.activities] == [
        ("TCP_ALLREDUCE", 1), ("MEMCPY_IN_FUSION_BUFFER", 2)]
    assert full.op.category_times() == {"communicate": 7, "memcpy_in": 1}
    assert running.negotiation is None and running.op.end is None


def test_parse_step_range():
    assert parse_step_range("1:3") == (1, 3)
    assert parse_step_range("2") == (2, 3)
    assert parse_step_range(":4") == (None, 4)
    assert parse_step_range("5:") == (5, None)
    for bad in ("x", "3:1", "1:2:3", "2:2"):
        with pytest.raises(ValueError):
            parse_step_range(bad)


# ------------------------------------------------------------------------------------------------
# Summary


def test_summary_numbers(trace_path):
    s = summarize(load(trace_path))
    assert s["counts"] == {"tensors": 3, "occurrences": 9, "errors": 0, "incomplete": 0,
                           "ranks": 2, "cycles": 6}
    assert s["window"] == {"steps": None, "start_ms": 0.1, "end_ms": 255.2,
                           "duration_ms": 255.1}

    ar = by(s["by_op"], "op", "ALLREDUCE")
    assert ar["count"] == 6
    assert ar["negotiate"] == {"count": 6, "total_ms": 147.6, "mean_ms": 24.6}
    assert ar["queue"] == {"count": 6, "total_ms": 3.0, "mean_ms": 0.5}
    assert ar["memcpy_in"] == {"count": 6, "total_ms": 2.4, "mean_ms": 0.4}
    assert ar["memcpy_out"] == {"count": 6, "total_ms": 2.4, "mean_ms": 0.4}
    assert ar["communicate"] == {"count": 6, "total_ms": 48.0, "mean_ms": 8.0}
    assert ar["execution"] == {"count": 6, "total_ms": 55.8, "mean_ms": 9.3}
    ag = by(s["by_op"], "op", "ALLGATHER")
    assert ag["count"] == 3
    assert ag["negotiate"] == {"count": 3, "total_ms": 6.15, "mean_ms": 2.05}
    assert ag["communicate"] == {"count": 3, "total_ms": 9.0, "mean_ms": 3.0}
    assert ag["memcpy_in"] == {"count": 0, "total_ms": 0.0, "mean_ms": None}
    assert [r["op"] for r in s["by_op"]] == ["ALLREDUCE", "ALLGATHER"]

    assert [r["tensor"] for r in s["by_tensor"]] == [W1, B1, EMB]
    w1 = s["by_tensor"][0]
    assert (w1["op"], w1["dtype"], w1["shape"], w1["count"]) == ("ALLREDUCE", "float32",
                                                                  "[256, 128]", 3)
    assert w1["negotiate"] == {"count": 3, "total_ms": 75.3, "mean_ms": 25.1}
    assert by(s["by_tensor"], "tensor", B1)["negotiate"]["total_ms"] == 72.3

    # The slow rank is the one reported ready last, by how much it kept the others waiting.
    waiters = s["top_waiters"]
    assert [w["tensor"] for w in waiters] == [W1, B1, EMB]
    assert waiters[0] == {
        "tensor": W1, "negotiations": 3, "negotiate_total_ms": 75.3, "negotiate_mean_ms": 25.1,
        "negotiate_max_ms": 30.1, "last_ready_rank": 1, "last_ready_count": 3, "with_ticks": 3,
        "lag_mean_ms": 25.0, "lag_max_ms": 30.0,
        "worst": {"step": 2, "start_ms": 200.1, "negotiate_ms": 30.1, "last_rank": 1,
                  "lag_ms": 30.0},
    }
    assert (waiters[1]["last_ready_rank"], waiters[1]["lag_mean_ms"]) == (1, 24.0)
    assert (waiters[2]["last_ready_rank"], waiters[2]["lag_max_ms"]) == (0, 2.0)
    assert s["ranks"] == [
        {"rank": 0, "reports": 9, "first": 6, "last": 3, "after_first_mean_ms": 0.667,
         "after_first_max_ms": 2.0},
        {"rank": 1, "reports": 9, "first": 3, "last": 6, "after_first_mean_ms": 16.333,
         "after_first_max_ms": 30.0},
    ]

    st = s["steps"]
    assert (st["count"], st["sampled"], st["order"]) == (3, 3, "chronological")
    assert st["time"] == {"count": 2, "mean_ms": 100.0, "median_ms": 100.0, "min_ms": 100.0,
                          "max_ms": 100.0}
    assert [(r["step"], r["start_ms"], r["duration_ms"], r["complete"], r["tensors"])
            for r in st["rows"]] == [(0, 0.1, 100.0, True, 3), (1, 100.1, 100.0, True, 3),
                                     (2, 200.1, 55.1, False, 3)]


def test_summary_of_a_step_window(trace_path):
    s = summarize(load(trace_path), steps=(1, 2))
    assert s["window"] == {"steps": "1:2", "start_ms": 100.1, "end_ms": 200.1,
                           "duration_ms": 100.0}
    assert s["counts"]["occurrences"] == 3
    w1 = by(s["by_tensor"], "tensor", W1)
    assert w1["count"] == 1 and w1["negotiate"]["total_ms"] == 25.1
    assert s["top_waiters"][0]["lag_max_ms"] == 25.0
    assert [r["step"] for r in s["steps"]["rows"]] == [1]
    s = summarize(load(trace_path), steps=(2, None))
    assert s["top_waiters"][0]["negotiate_total_ms"] == 30.1


def test_summary_text(trace_path, capsys):
    rc, out, err = run(capsys, "summary", trace_path)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"Hora timeline {trace_path}"
    assert "3 tensors, 9 tensor operations, 2 ranks, 0 errors, 6 cycles" in out
    assert "step time: mean 100.000, median 100.000" in out
    assert "last step: runs to the end of the trace" in out

    def table(title: str) -> list[str]:
        i = next(n for n, line in enumerate(lines) if line.startswith(title))
        j = next((n for n in range(i + 1, len(lines)) if not lines[n].strip()), len(lines))
        return lines[i + 1:j]

    def body(title: str) -> list[str]:
        """The header, dashes and rows of a table."""
        rows = table(title)
        dashes = next(n for n, r in enumerate(rows) if set(r.strip()) <= {"-", " "})
        return [r for r in rows[dashes - 1:] if "reported ready last" not in r]

    for title in ("Time by op type", "Time by tensor", "Top waiters", "Ranks"):
        rows = body(title)
        assert len(rows) >= 4 and len({len(r) for r in rows}) == 1, (
            f"{title} is not aligned:\n" + "\n".join(rows))

    waiters = body("Top waiters")
    assert "negotiate" in table("Top waiters")[1] and "last ready" in table("Top waiters")[1]
    assert waiters[2].split() == [W1, "3", "75.300", "25.100", "30.100", "1", "(3/3)",
                                  "25.000", "30.000"]
    assert waiters[4].split()[0] == EMB and " 0 (3/3) " in waiters[4]
    by_op = body("Time by op type")
    assert by_op[2].split() == ["ALLREDUCE", "6", "147.600", "24.600", "3.000", "0.500",
                                "2.400", "2.400", "48.000", "8.000", "55.800"]
    assert by_op[3].split()[:2] == ["ALLGATHER", "3"] and by_op[3].split()[6:8] == ["-"] * 2
    tensors = body("Time by tensor")
    assert tensors[2].split()[:6] == [W1, "ALLREDUCE", "float32", "[256,", "128]", "3"]
    assert lines[-1] == ("  rank 1 reported ready last 6 times out of 9, 16.333 ms after the "
                         "first rank on average: the others wait for it")


def test_summary_top_limits_the_tensor_lists(trace_path, capsys):
    rc, out, _ = run(capsys, "summary", trace_path, "--top", "1")
    assert rc == 0
    assert "1 of 3 tensors" in out and "... 2 more (use --top)" in out
    s = summarize(load(trace_path), top=1)
    assert len(s["by_tensor"]) == 1 and len(s["top_waiters"]) == 1
    assert s["tensors_not_shown"] == 2


def test_summary_json(trace_path, capsys):
    rc, out, _ = run(capsys, "summary", trace_path, "--json", "--steps", "0:2")
    assert rc == 0
    doc = json.loads(out)
    assert doc == json.loads(json.dumps(summarize(load(trace_path), steps=(0, 2))))
    assert doc["window"]["steps"] == "0:2"
    assert doc["top_waiters"][0]["tensor"] == W1
    assert doc["top_waiters"][0]["last_ready_rank"] == 1
    assert doc["by_op"][0]["negotiate"]["total_ms"] == pytest.approx(20.1 + 19.1 + 25.1 + 24.1)


def test_step_errors(trace_path, tmp_path, capsys):
    rc, _, err = run(capsys, "summary", trace_path, "--steps", "7:9")
    assert rc == 1 and "no steps in 7:9" in err and "0..2" in err
    with pytest.raises(SystemExit) as e:
        main(["summary", trace_path, "--steps", "a:b"])
    assert e.value.code == 2
    assert "bad step range" in capsys.readouterr().err
    no_steps = tmp_path / "nosteps.json"
    no_steps.write_text(engine_text(records(
        [e for e in make_events(1) if e[3] != "STEP"])))
    rc, out, err = run(capsys, "summary", str(no_steps), "--steps", "0:1")
    assert rc == 1 and "no STEP markers" in err
    rc, out, _ = run(capsys, "summary", str(no_steps))
    assert rc == 0 and "Steps (" not in out and "rank 1 reported ready last" in out


def test_sampled_trace(tmp_path):
    """HORA_TIMELINE_SAMPLE_EVERY=2: step 1 is not recorded (its STEP marker is), and the
    allgather of step 0 lacks its end (the engine now writes it; a trace cut short or from an
    older writer does not): the summary counts it as incomplete."""
    events = []
    for ev in make_events():
        ts = ev[0]
        if ev[3] == "STEP" or not (step_start(1) <= ts < step_start(2)):
            events.append(ev)
    g = step_start(0) + 50_000
    events = [e for e in events if not (e[1] == EMB and e[0] == g + 5100)]  # TCP_ALLGATHER's E
    path = tmp_path / "sampled.json"
    path.write_text(engine_text(records(events)))
    t = load(str(path))
    assert [i.occurrences for i in t.step_infos()] == [3, 0, 3]
    assert t.incomplete_spans == 2 and t.unmatched_ends == 0
    s = summarize(t)
    assert s["counts"]["incomplete"] == 1
    assert s["steps"]["time"]["count"] == 1  # step 1 is not a measured step
    assert by(s["by_tensor"], "tensor", W1)["negotiate"]["total_ms"] == pytest.approx(50.2)
    emb = by(s["by_tensor"], "tensor", EMB)
    assert emb["count"] == 2 and emb["negotiate"]["total_ms"] == 4.1
    assert emb["communicate"] == {"count": 1, "total_ms": 3.0, "mean_ms": 3.0}
    from hora.timeline import format_summary
    text = format_summary(s)
    assert "not recorded (sampling)" in text and "recorded only in part" in text


# ------------------------------------------------------------------------------------------------
# Cut, truncated and other layouts


def test_file_cut_mid_record(trace_path, tmp_path, capsys):
    text = Path(trace_path).read_text()
    full = load(trace_path)
    cut_at = text.index('"name":"TCP_ALLREDUCE"', len(text) // 2) + 10
    cut = tmp_path / "cut.json"
    cut.write_text(text[:cut_at])
    with pytest.raises(ValueError):
        json.loads(cut.read_text())
    t = load(str(cut))
    assert t.cut and 0 < t.records < full.records
    assert t.records == text[:cut_at].count("\n") - 1  # every line but "[" and the cut one
    rc, out, _ = run(capsys, "summary", str(cut))
    assert rc == 0 and "the file was not closed" in out
    rc, out, _ = run(capsys, "summary", str(cut), "--json")
    assert json.loads(out)["cut"] is True


def test_every_cut_point_is_readable(trace_path, tmp_path):
    text = Path(trace_path).read_text()
    path = tmp_path / "cut.json"
    previous = 0
    for n in range(3, len(text), 97):
        path.write_text(text[:n])
        t = load(str(path))
        assert t.cut
        assert t.records >= previous
        previous = t.records
        summarize(t)
    path.write_text("[\n")
    assert load(str(path)).records == 0


def test_truncation_marker(tmp_path, capsys):
    recs = records(make_events(2))
    recs.append('{"ph":"i","name":"TIMELINE_TRUNCATED","ts":150000,"s":"g","pid":0,"tid":0,'
                '"args":{"max_mb":1}}')
    path = tmp_path / "capped.json"
    path.write_text(engine_text(recs))
    t = load(str(path))
    assert (t.truncated_at, t.truncated_max_mb, t.cut) == (150_000, 1, False)
    rc, out, _ = run(capsys, "summary", str(path))
    assert rc == 0
    assert "recording stopped at 150.000 ms: the file reached its size cap " \
           "(HORA_TIMELINE_MAX_MB=1)" in out


def test_other_layouts(trace_path, tmp_path):
    expected = summarize(load(trace_path))
    expected.pop("file")
    recs = json.loads(Path(trace_path).read_text())

    def check(name: str, content: bytes, cut: bool) -> None:
        path = tmp_path / name
        path.write_bytes(content)
        t = load(str(path))
        assert t.cut is cut, name
        s = summarize(t)
        s.pop("file")
        s.pop("cut")
        assert s == {k: v for k, v in expected.items() if k != "cut"}, name

    pretty = json.dumps(recs, indent=1).encode()
    check("pretty.json", pretty, False)
    check("one_line.json", json.dumps(recs).encode(), False)
    check("object.json", json.dumps({"traceEvents": recs}).encode(), False)
    # Horovod's writer leaves a trailing ",\n" and no "]".
    check("open.json", ("[\n" + "".join(json.dumps(r) + ",\n" for r in recs)).encode(), True)
    check("trace.json.gz", gzip.compress(Path(trace_path).read_bytes()), False)
    # A pretty-printed file cut inside its last record.
    extra = {"ph": "i", "name": "CYCLE_START", "ts": 1, "s": "g", "pid": 0, "tid": 0}
    cut_pretty = json.dumps(recs + [extra], indent=1).encode()
    check("pretty_cut.json", cut_pretty[:cut_pretty.rindex(b'"CYCLE_START"')], True)


def test_unreadable_files(tmp_path, capsys):
    rc, _, err = run(capsys, "summary", str(tmp_path / "missing.json"))
    assert rc == 1 and "No such file" in err
    empty = tmp_path / "empty.json"
    empty.write_text("")
    rc, _, err = run(capsys, "summary", str(empty))
    assert rc == 1 and "empty" in err
    junk = tmp_path / "junk.json"
    junk.write_text("hello\n")
    rc, _, err = run(capsys, "summary", str(junk))
    assert rc == 1 and "not a Chrome trace" in err


def test_module_entry_point(trace_path):
    proc = subprocess.run([sys.executable, "-m", "hora.timeline", "summary", trace_path,
                           "--top", "2"], check=False, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Top waiters" in proc.stdout and "1 (3/3)" in proc.stdout


# ------------------------------------------------------------------------------------------------
# Plot


def test_plot_needs_matplotlib(trace_path, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "out.png"
    rc, _, err = run(capsys, "plot", trace_path, "-o", str(out))
    assert rc == 1
    assert "needs matplotlib" in err and "pip install matplotlib" in err
    assert not out.exists()


def test_plot_writes_a_png(trace_path, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="hora-timeline plot needs matplotlib")
    out = tmp_path / "gantt.png"
    rc, stdout, err = run(capsys, "plot", trace_path, "-o", str(out))
    assert rc == 0, err
    assert "steps 1..2, 3 of 3 tensors, 6 tensor operations" in stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    out2 = str(tmp_path / "two.png")
    rc, stdout, err = run(capsys, "plot", trace_path, "-o", out2, "--steps", "0:3",
                          "--max-tensors", "2")
    assert rc == 0, err
    assert "2 of 3 tensors, 9 tensor operations" in stdout
    assert os.path.getsize(out2) > 10_000
    rc, _, err = run(capsys, "plot", trace_path, "-o", str(tmp_path / "x.png"), "--steps", "5")
    assert rc == 1 and "no steps in 5:6" in err
