"""Compares two runs of the suite saved by ``run_suite.py --results``: the tests that pass in the
reference run (e.g. gloo) and not in the other (e.g. hora), grouped by the error line they end
with, and the other way round::

    python3 tests/torch_suite/compare_runs.py gloo_ws2.json hora_ws2.json
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from suite_report import SuiteRun, load_run


def _label(run: SuiteRun) -> str:
    return f"{run.backend} (world size {run.world_size})"


def print_lost(reference: SuiteRun, other: SuiteRun) -> None:
    """The tests that pass in ``reference`` but not in ``other``, grouped by ``other``'s error."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name, result in sorted(reference.tests.items()):
        if result.outcome != "passed":
            continue
        theirs = other.tests.get(name)
        if theirs is None:
            groups["(not run)"].append(name)
        elif theirs.outcome != "passed":
            groups[f"{theirs.outcome}: {theirs.message}"].append(name)
    lost = sum(len(names) for names in groups.values())
    print(f"\npassed on {_label(reference)}, not on {_label(other)}: {lost}")
    for why, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        print(f"\n  {len(names)} x {why}")
        for name in names:
            print(f"      {name}")


def main(argv: list[str] | None = None) -> int:
    """Print both directions of the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", help="results JSON of the reference run (e.g. gloo)")
    parser.add_argument("other", help="results JSON of the run to compare (e.g. hora)")
    args = parser.parse_args(argv)
    reference, other = load_run(args.reference), load_run(args.other)
    for run in (reference, other):
        counts = run.counts()
        print(f"{_label(run)}: " + ", ".join(f"{counts.get(o, 0)} {o}" for o in
                                             ("passed", "failed", "error", "skipped"))
              + f" in {run.seconds:.0f} s")
    print_lost(reference, other)
    print_lost(other, reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
