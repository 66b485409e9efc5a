"""``hora-timeline`` (``python -m hora.timeline``): summarize or plot a Hora timeline.

    hora-timeline summary trace.json [--top N] [--steps a:b] [--json]
    hora-timeline plot trace.json -o out.png [--steps a:b] [--max-tensors N] [--all-steps]

Exit status: 0 on success, 1 when the trace cannot be read or plotted (or matplotlib is missing),
2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from hora.timeline.summary import format_summary, summarize
from hora.timeline.trace import TraceError, load, parse_step_range

PROG = "hora-timeline"


def _step_range(text: str) -> tuple[int | None, int | None]:
    try:
        return parse_step_range(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hora-timeline``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Make a Hora timeline (HORA_TIMELINE=trace.json) readable: where the time "
                    "went, and which rank the others waited for.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{summary,plot}")
    sub.required = True
    steps_help = ("only the steps a <= k < b (a:b, a:, :b, or one step a); steps begin each time "
                  "the first tensor ever negotiated is negotiated again")

    s = sub.add_parser("summary", help="time per op type, tensor, step and rank, as text tables",
                       description="Time spent negotiating, queued, copying and communicating, "
                                   "per op type and per tensor; step times; the tensors whose "
                                   "negotiation took longest and the rank that reported ready "
                                   "last. Times are in milliseconds.")
    s.add_argument("trace", help="timeline file (JSON, or gzipped JSON)")
    s.add_argument("--top", type=_positive, default=10, metavar="N",
                   help="rows in the per-tensor, top-waiter and slowest-step lists (default 10)")
    s.add_argument("--steps", type=_step_range, metavar="a:b", help=steps_help)
    s.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = sub.add_parser("plot", help="Gantt chart of a few steps (PNG; needs matplotlib)",
                       description="Gantt chart: one row per tensor, bars for negotiate, queue, "
                                   "memcpy and communicate, rank-ready ticks, STEP markers.")
    p.add_argument("trace", help="timeline file (JSON, or gzipped JSON)")
    p.add_argument("-o", "--output", required=True, help="image to write (e.g. out.png)")
    p.add_argument("--steps", type=_step_range, metavar="a:b",
                   help=steps_help + " (default: 1:4, or the first recorded step)")
    p.add_argument("--all-steps", action="store_true",
                   help="plot the whole trace (can be slow and crowded on a long run)")
    p.add_argument("--max-tensors", type=_positive, default=20, metavar="N",
                   help="rows: the N tensors with the most time in the window (default 20)")
    return parser


def _summary(args: argparse.Namespace) -> int:
    trace = load(args.trace)
    summary = summarize(trace, top=args.top, steps=args.steps)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        sys.stdout.write(format_summary(summary))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from hora.timeline.plot import MatplotlibMissing, plot

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MatplotlibMissing("hora-timeline plot needs matplotlib, which is not installed: "
                                "pip install matplotlib") from None
    trace = load(args.trace)
    result = plot(trace, args.output, steps=args.steps, max_tensors=args.max_tensors,
                  all_steps=args.all_steps)
    print(f"wrote {result.path}: {result.description}, {result.tensors} of {result.tensors_in_window} "
          f"tensors, {result.occurrences} tensor operations")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``hora-timeline`` with ``argv`` (default: the command line); returns the exit
    status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "summary":
            return _summary(args)
        return _plot(args)
    except BrokenPipeError:
        # The reader went away (e.g. "| head"): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except ImportError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except TraceError as e:
        print(f"{PROG}: {args.trace}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
