#!/usr/bin/env python3
"""Checks the layering of core/: folders must not include each other in a cycle, and transport
backends must not include each other.

Reads every `#include "core/..."` of every file under core/ and maps both ends to their layer:

- core/<folder>/...: the layer core/<folder>. A transport backend (core/transport/tcp, shm, mpi,
  nccl) counts as core/transport for cycles: the transport registry (core/transport/backends.cc)
  includes every backend and every backend includes the Communicator interface, which is one
  layer by design (docs/development.md), not a cycle.
- core/<name>.h / .cc at the top (runtime.h, runtime_impl.h, the generated config.h): the layer
  core/<name up to the first underscore>, so the runtime's top files and its folder core/runtime/
  (the background loop's parts) are one layer, core/runtime, and config.h (which includes
  nothing) is core/config.

Fails (exit 1) on
- a cycle between layers that ALLOWED_CYCLES does not list, printed as the chain of includes that
  closes it (one include per step, file:line);
- an include from one backend into another (core/transport/tcp/x.h including core/transport/shm/...),
  whichever way: backends share code only through core/transport itself;
- an ALLOWED_CYCLES entry that no longer occurs (remove it: the list only shrinks).
- an include from the runtime (core/runtime*) into a CPU transport backend (tcp, shm, mpi): the
  runtime reaches them only through core/transport's interfaces (Transport, Communicator,
  ControlChannel). The NCCL backend is the GPU path's own (core/ops/gpu_executor.h), and the
  runtime still checks GPU requests against it directly (RUNTIME_MAY_INCLUDE).

Python standard library only. Usage: tests/check_layers.py [--root DIR] [--no-allow-list]
(--root: the tree whose core/ is read, default this repository; --no-allow-list: no cycle allowed).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BACKENDS = ("tcp", "shm", "mpi", "nccl")
SOURCE_SUFFIXES = (".h", ".cc", ".in")
INCLUDE = re.compile(r'^\s*#\s*include\s*"(core/[^"]+)"')

# Cycles between layers that exist today and are accepted until they are taken apart; each is
# written as its layers in include order, starting at the alphabetically first, and says why it
# stays. Any other cycle fails the check.
ALLOWED_CYCLES: dict[tuple[str, ...], str] = {
    # None today. The three this check found when it was written are gone:
    #   core/coordinator <-> core/fusion and core/coordinator <-> core/transport (the NCCL
    #   backend's request checks), both through core/coordinator/messages.h, now core/messages;
    #   core/collectives <-> core/transport, through hierarchical.h, now collectives::Group.
    # An entry looks like
    #   ("core/coordinator", "core/fusion"): "why it stays, and what would take it apart",
}


# Backends the runtime may include directly (see the module doc).
RUNTIME_MAY_INCLUDE = ("nccl",)


def layer_of(path: str) -> str:
    """The layer of a path below the repository root ("core/...")."""
    parts = path.split("/")
    if len(parts) == 2:  # core/runtime_impl.h, core/config.h
        return "core/" + parts[1].split(".")[0].split("_")[0]
    return "/".join(parts[:2])


def backend_of(path: str) -> str | None:
    """The transport backend a path belongs to (core/transport/tcp), or None."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1] == "transport" and parts[2] in BACKENDS:
        return "/".join(parts[:3])
    return None


class Include:
    """One `#include "core/..."` line: who includes what, where."""

    def __init__(self, source: str, line: int, target: str) -> None:
        self.source, self.line, self.target = source, line, target

    def __str__(self) -> str:
        return f"{self.source}:{self.line} includes {self.target}"


def read_includes(root: Path) -> list[Include]:
    """Every core/ include of every source file under root/core, in path and line order."""
    found = []
    for file in sorted((root / "core").rglob("*")):
        if not file.is_file() or file.suffix not in SOURCE_SUFFIXES:
            continue
        source = file.relative_to(root).as_posix()
        for number, text in enumerate(file.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(text)
            if match:
                found.append(Include(source, number, match.group(1)))
    return found


def layer_graph(includes: list[Include]) -> dict[str, dict[str, Include]]:
    """layer -> {layer it includes: the first include that shows it}."""
    graph: dict[str, dict[str, Include]] = {}
    for inc in includes:
        a, b = layer_of(inc.source), layer_of(inc.target)
        graph.setdefault(a, {})
        graph.setdefault(b, {})
        if a != b:
            graph[a].setdefault(b, inc)
    return graph


def cycles(graph: dict[str, dict[str, Include]]) -> list[tuple[str, ...]]:
    """Every elementary cycle of the graph, each once, starting at its smallest layer name (the
    graph has a few dozen layers, so a depth-first search from each start is quick)."""
    found = []
    nodes = sorted(graph)
    for start in nodes:
        # Only paths through layers after `start`: each cycle is found from its smallest layer.
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    found.append(tuple(path))
                elif nxt > start and nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return sorted(set(found))


def describe(cycle: tuple[str, ...], graph: dict[str, dict[str, Include]]) -> str:
    """The cycle as its chain of includes, one step a line."""
    steps = [" -> ".join(cycle + (cycle[0],))]
    for a, b in zip(cycle, cycle[1:] + (cycle[0],)):
        steps.append(f"    {a} -> {b}: {graph[a][b]}")
    return "\n".join(steps)


def backend_crossings(includes: list[Include]) -> list[Include]:
    """Includes from one transport backend into another."""
    out = []
    for inc in includes:
        a, b = backend_of(inc.source), backend_of(inc.target)
        if a is not None and b is not None and a != b:
            out.append(inc)
    return out


def runtime_reaches(includes: list[Include]) -> list[Include]:
    """Includes from the runtime into a backend other than RUNTIME_MAY_INCLUDE's."""
    out = []
    for inc in includes:
        backend = backend_of(inc.target)
        if layer_of(inc.source) == "core/runtime" and backend is not None and \
                backend.rsplit("/", 1)[1] not in RUNTIME_MAY_INCLUDE:
            out.append(inc)
    return out


def check(root: Path, allowed: dict[tuple[str, ...], str]) -> list[str]:
    """The problems of root's core/ ([] when its layering is clean)."""
    includes = read_includes(root)
    graph = layer_graph(includes)
    problems = []
    found = cycles(graph)
    for cycle in found:
        if cycle in allowed:
            print(f"allowed cycle ({allowed[cycle]}):\n{describe(cycle, graph)}")
        else:
            problems.append(f"cycle between layers of core/:\n{describe(cycle, graph)}")
    for cycle in sorted(set(allowed) - set(found)):
        problems.append(f"allowed cycle {' -> '.join(cycle)} no longer occurs: remove it from "
                        "ALLOWED_CYCLES in tests/check_layers.py")
    for inc in backend_crossings(includes):
        problems.append(f"one transport backend includes another ({backend_of(inc.source)} -> "
                        f"{backend_of(inc.target)}): {inc}; share code through core/transport")
    for inc in runtime_reaches(includes):
        problems.append(f"the runtime includes a transport backend ({backend_of(inc.target)}): "
                        f"{inc}; reach it through core/transport's interfaces")
    if not problems:
        print(f"check_layers: {len(includes)} includes between {len(graph)} layers of core/, "
              f"no cycle outside the allow-list ({len(found)} allowed), no backend includes "
              "another, the runtime reaches CPU backends through interfaces")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Checks the layering of core/ (no cycle between "
                                     "folders, no backend including another).")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the tree whose core/ is checked (default: this repository)")
    parser.add_argument("--no-allow-list", action="store_true",
                        help="allow no cycle (ALLOWED_CYCLES is ignored)")
    args = parser.parse_args(argv)
    if not (args.root / "core").is_dir():
        print(f"check_layers: {args.root / 'core'} is not a directory", file=sys.stderr)
        return 2
    problems = check(args.root, {} if args.no_allow_list else ALLOWED_CYCLES)
    for problem in problems:
        print(f"check_layers: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
