"""Turns the benchmarks' results (bench/results/*.json) into the documentation.

    python bench/report.py            # write docs/benchmarks/generated/ and README's headline
    python bench/report.py --check    # exit 1 if any of them differs from what the JSON gives

Writes into docs/benchmarks/generated/ one Markdown table per results file (<stem>.md, with the
machine, versions and date under it), one "no results yet" page per benchmark without results,
and a log-log plot of allreduce time against size per implementation for each allreduce results
file (<stem>.png); then replaces what lies between README.md's lines
``<!-- bench:headline:start -->`` and ``<!-- bench:headline:end -->`` with the headline table
(from allreduce-np2.json), when those lines are there. ``--check`` writes nothing: it lists every
generated file that is stale, missing or made from no results file, every generated file that
docs/benchmarks/index.md does not embed, and a stale README headline.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from common.launch import REPO
from common.results import RESULTS_DIR
from reporting import headline, plots
from reporting.inputs import load_all
from reporting.pages import pages

GENERATED = REPO / "docs" / "benchmarks" / "generated"
INDEX = REPO / "docs" / "benchmarks" / "index.md"
README = REPO / "README.md"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a generated file or the headline is stale")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=GENERATED, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=Path, default=INDEX, help=argparse.SUPPRESS)
    parser.add_argument("--readme", type=Path, default=README, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def unembedded(index: Path, names: list[str]) -> list[str]:
    """The generated files that the documentation page neither includes nor shows."""
    text = index.read_text() if index.exists() else ""
    return [n for n in names
            if f'--8<-- "docs/benchmarks/generated/{n}"' not in text
            and f"(generated/{n})" not in text]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        docs = load_all(args.results)
    except ValueError as e:
        print(f"report: {e}", file=sys.stderr)
        return 1
    texts = pages(docs)
    images = plots.plots(docs)
    problems: list[str] = []

    def refresh(path: Path, current: bool, make: Callable[[Path], object], verb: str) -> None:
        """A current file stays; under --check another is listed, otherwise made again."""
        if current:
            return
        if args.check:
            problems.append(f"{shown(path)}: {'stale' if path.exists() else 'missing'}")
            return
        args.out.mkdir(parents=True, exist_ok=True)
        make(path)
        print(f"{verb} {shown(path)}")

    for name, text in texts.items():
        path = args.out / name
        refresh(path, path.exists() and path.read_text() == text,
                lambda p, text=text: p.write_text(text), "wrote")
    for name, data in images.items():
        path = args.out / name
        refresh(path, plots.is_current(path, data), lambda p, data=data: plots.draw(p, data),
                "drew")
    made = set(texts) | set(images)
    for path in sorted(args.out.glob("[!.]*")) if args.out.exists() else []:
        if path.name not in made:
            if args.check:
                problems.append(f"{shown(path)}: made from no results file (run bench/report.py)")
            else:
                path.unlink()
                print(f"removed {shown(path)}")
    missing = unembedded(args.index, sorted(made))
    for name in missing:
        line = f"{shown(args.index)} does not embed generated/{name}"
        if args.check:
            problems.append(line)
        else:
            print(f"note: {line}")

    block = headline.headline(docs.get(headline.SOURCE))
    readme = args.readme.read_text() if args.readme.exists() else ""
    updated = headline.splice(readme, block)
    if updated is None:
        print(f"note: {shown(args.readme)} has no {headline.START} ... {headline.END} lines; "
              "no headline table written")
    elif updated != readme:
        if args.check:
            problems.append(f"{shown(args.readme)}: the headline table is stale")
        else:
            args.readme.write_text(updated)
            print(f"wrote the headline table of {shown(args.readme)}")

    for p in problems:
        print(p)
    if args.check and problems:
        print(f"report --check: {len(problems)} problem(s); `python bench/report.py` rewrites "
              "the generated files from bench/results")
    elif args.check:
        print("report --check: the generated files match bench/results")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
