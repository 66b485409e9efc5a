"""Reading Hora timelines: ``hora-timeline summary`` and ``hora-timeline plot``.

``HORA_TIMELINE=/path/trace.json`` makes rank 0 write a Chrome-trace timeline (it opens in
chrome://tracing or https://ui.perfetto.dev). This package turns it into something a person can
read: a summary of where the time went (per op type, tensor, step and rank, including which rank
the others waited for), and a Gantt chart of a few steps.

    python -m hora.timeline summary trace.json [--top N] [--steps a:b] [--json]
    python -m hora.timeline plot trace.json -o out.png [--steps a:b] [--max-tensors N]

The plot needs matplotlib; reading and summarizing need only the standard library.
"""

from hora.timeline.summary import format_summary, summarize
from hora.timeline.trace import (
    Activity,
    Negotiation,
    Occurrence,
    Op,
    StepInfo,
    Tick,
    Trace,
    TraceError,
    load,
    parse_records,
    parse_step_range,
    read_records,
)

__all__ = [
    "Activity",
    "Negotiation",
    "Occurrence",
    "Op",
    "StepInfo",
    "Tick",
    "Trace",
    "TraceError",
    "format_summary",
    "load",
    "parse_records",
    "parse_step_range",
    "read_records",
    "summarize",
]
