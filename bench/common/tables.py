"""Markdown tables, as the scripts print them and as bench/report.py writes them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from common.timing import format_time


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table: header, separator, one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def time_cell(seconds: float | None) -> str:
    """A time, or '-' where there is none."""
    return "-" if seconds is None else format_time(seconds)


def ratio_cell(value: float | None, base: float | None, digits: int = 2) -> str:
    """value / base, or '-' where either is missing."""
    if value is None or not base:
        return "-"
    return f"{value / base:.{digits}f}"
