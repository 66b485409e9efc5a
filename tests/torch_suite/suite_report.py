"""Collects the outcome of every test of a suite run (a pytest plugin) and prints the summary:
counts, the failing tests with the first line of their error, and the skip reasons grouped."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TextIO

import pytest

OUTCOMES = ("passed", "failed", "error", "skipped")

# A line that ends a Python traceback: "SomeError: message" (or the bare name).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*"
    r"(?:Error|Exception|Exit|Interrupt|Timeout|Failure)(?::.*)?$"
)
# How the suite's parent wraps what a rank raised.
_RANK_FAILED = re.compile(r"Process (\d+) exited with error code \d+ and exception:")
# How Python's multiprocessing reports a rank whose target raised (outside the suite's test).
_RANK_DIED = re.compile(r"^Process process (\d+):$")


@dataclass
class CaseResult:
    """One test's outcome, how long its call took, and (unless it passed) why."""

    outcome: str
    seconds: float = 0.0
    message: str = ""


@dataclass
class SuiteRun:
    """Every test's result in one run of the suite, with the run's settings."""

    backend: str
    world_size: int
    init_method: str
    timeout: int
    seconds: float = 0.0
    tests: dict[str, CaseResult] = field(default_factory=dict)

    def counts(self) -> Counter[str]:
        """How many tests ended in each outcome."""
        return Counter(result.outcome for result in self.tests.values())

    def save(self, path: str) -> None:
        """Write the run as JSON (see :func:`load_run`)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=1, sort_keys=True)


def load_run(path: str) -> SuiteRun:
    """A run saved by :meth:`SuiteRun.save`."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    tests = {name: CaseResult(**result) for name, result in data.pop("tests").items()}
    return SuiteRun(tests=tests, **data)


def _unprefixed_lines(text: str) -> list[str]:
    """The report's lines without pytest's ``E   `` markers and indentation."""
    lines = []
    for line in text.splitlines():
        if line.startswith("E ") or line == "E":
            line = line[1:]
        lines.append(line.strip())
    return lines


def _last_exception_in_block(lines: list[str], marker: re.Pattern[str]) -> str:
    """``[rank N] <exception line>`` for the first block that ``marker`` opens (a line naming
    the rank in its first group), or "" when there is none."""
    starts = [i for i, line in enumerate(lines) if marker.search(line)]
    if not starts:
        return ""
    end = starts[1] if len(starts) > 1 else len(lines)
    found = [line for line in lines[starts[0] + 1:end] if _EXCEPTION_LINE.match(line)]
    rank = marker.search(lines[starts[0]])
    return f"[rank {rank.group(1)}] {found[-1]}" if found and rank else ""


def error_line(text: str, stderr: str = "") -> str:
    """The line that says what went wrong: the exception the first failing rank raised in the
    test (sent to the parent), else the one a rank died of outside it (in the captured
    ``stderr``, e.g. while creating the process group), else the report's last exception line."""
    lines = _unprefixed_lines(text)
    line = (_last_exception_in_block(lines, _RANK_FAILED)
            or _last_exception_in_block(_unprefixed_lines(stderr), _RANK_DIED))
    if line:
        return line
    found = [line for line in lines if _EXCEPTION_LINE.match(line)]
    if found:
        return found[-1]
    return next((line for line in reversed(lines) if line), "")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def method_name(nodeid: str) -> str:
    """The suite's name for a test: the method name in a pytest node id."""
    return nodeid.rsplit("::", 1)[-1]


class ResultCollector:
    """A pytest plugin that fills a :class:`SuiteRun` as tests report."""

    def __init__(self, run: SuiteRun) -> None:
        self.run = run

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the phase's outcome: a failing setup or teardown is an error, a failing call a
        failure, a skip in any phase a skip."""
        if report.passed and report.when != "call":
            return  # a test passes by its call; one interrupted after its setup is not counted
        name = method_name(report.nodeid)
        result = self.run.tests.setdefault(name, CaseResult("passed"))
        if report.when == "call":
            result.seconds = round(report.duration, 2)
        if report.skipped:
            result.outcome, result.message = "skipped", _skip_reason(report)
        elif report.failed:
            failed_call = report.when == "call" and result.outcome != "error"
            result.outcome = "failed" if failed_call else "error"
            result.message = error_line(report.longreprtext, report.capstderr)


def print_summary(run: SuiteRun, out: TextIO) -> None:
    """Counts, failing tests with their error line, and skip reasons grouped with counts."""
    counts = run.counts()
    print(f"\n== torch distributed suite: backend {run.backend}, world size {run.world_size}, "
          f"init {run.init_method}, {len(run.tests)} tests in {run.seconds:.0f} s", file=out)
    print("   " + ", ".join(f"{counts.get(o, 0)} {o}" for o in OUTCOMES), file=out)
    for outcome in ("failed", "error"):
        names = sorted(n for n, r in run.tests.items() if r.outcome == outcome)
        if names:
            print(f"\n{outcome} ({len(names)}):", file=out)
            for name in names:
                print(f"  {name}: {run.tests[name].message}", file=out)
    reasons = Counter(r.message for r in run.tests.values() if r.outcome == "skipped")
    if reasons:
        print("\nskipped, by reason:", file=out)
        for reason, count in reasons.most_common():
            print(f"  {count:4d}  {reason}", file=out)

