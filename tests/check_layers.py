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
- an include from the runtime (core/runtime*), the ops (core/ops) or the bindings (bindings/, whose
  includes of core/ are read for this rule only) into any transport backend (tcp, shm, mpi,
  nccl): they reach backends only through core/transport's interfaces (Transport, Communicator,
  ControlChannel, DeviceBackend), unless ALLOWED_BACKEND_INCLUDES lists the file and backend;
- an ALLOWED_BACKEND_INCLUDES entry that no longer occurs (the list only shrinks).

Python standard library only. Usage: tests/check_layers.py [--root DIR] [--no-allow-list]
(--root: the tree whose core/ and bindings/ are read, default this repository; --no-allow-list:
no cycle and no backend include allowed).
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


# Layers that reach transport backends only through core/transport's interfaces.
ABOVE_TRANSPORTS = ("core/runtime", "core/ops", "bindings")

# Files of those layers that still include a backend, each with the backend and why it stays; the
# runtime has none. An entry looks like
#   ("core/ops/x.h", "core/transport/nccl"): "why it stays, and what would take it apart",
ALLOWED_BACKEND_INCLUDES: dict[tuple[str, str], str] = {
    ("core/ops/gpu_executor.h", "core/transport/nccl"):
        "the GPU executor drives NCCL communicators, CUDA streams and events and the device "
        "fusion buffer; a device communicator / buffer interface in core/transport would take "
        "it apart",
    ("bindings/gpu_intake.h", "core/transport/nccl"):
        "the intake stream and ready event of a CUDA tensor are made with the CUDA runtime that "
        "NCCL's library loads; the same device interface would take it apart",
    ("bindings/register_runtime.cc", "core/transport/nccl"):
        "nccl_built() and the launcher's report read the GPU library's state; the device "
        "backend's capabilities could answer them",
}


def layer_of(path: str) -> str:
    """The layer of a path below the repository root ("core/...", or "bindings" for bindings/)."""
    parts = path.split("/")
    if parts[0] != "core":
        return parts[0]
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


def read_includes(root: Path, folder: str = "core") -> list[Include]:
    """Every core/ include of every source file under root/folder, in path and line order."""
    found = []
    for file in sorted((root / folder).rglob("*")):
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


def backend_reaches(includes: list[Include]) -> list[Include]:
    """Includes from a layer of ABOVE_TRANSPORTS into a transport backend."""
    return [inc for inc in includes
            if layer_of(inc.source) in ABOVE_TRANSPORTS and backend_of(inc.target) is not None]


def reach_problems(includes: list[Include], allowed: dict[tuple[str, str], str]) -> list[str]:
    """The backend includes of ABOVE_TRANSPORTS that `allowed` does not list, and its stale
    entries."""
    problems, seen = [], set()
    for inc in backend_reaches(includes):
        key = (inc.source, backend_of(inc.target) or "")
        seen.add(key)
        if key in allowed:
            continue
        layer = layer_of(inc.source)
        who = "the runtime" if layer == "core/runtime" else layer
        problems.append(f"{who} includes a transport backend ({key[1]}): {inc}; reach it "
                        "through core/transport's interfaces")
    for source, backend in sorted(set(allowed) - seen):
        problems.append(f"allowed backend include {source} -> {backend} no longer occurs: remove "
                        "it from ALLOWED_BACKEND_INCLUDES in tests/check_layers.py")
    return problems


def check(root: Path, allowed: dict[tuple[str, ...], str],
          backend_allowed: dict[tuple[str, str], str] | None = None) -> list[str]:
    """The problems of root's core/ and bindings/ ([] when their layering is clean);
    `backend_allowed`: the backend includes allowed (none when not given)."""
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
    bindings = read_includes(root, "bindings") if (root / "bindings").is_dir() else []
    problems += reach_problems(includes + bindings, backend_allowed or {})
    if not problems:
        print(f"check_layers: {len(includes)} includes between {len(graph)} layers of core/, "
              f"no cycle outside the allow-list ({len(found)} allowed), no backend includes "
              "another, the runtime, ops and bindings reach backends through interfaces "
              f"({len(backend_allowed or {})} includes allowed)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Checks the layering of core/ (no cycle between "
                                     "folders, no backend including another, none included "
                                     "above the transports).")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the tree whose core/ is checked (default: this repository)")
    parser.add_argument("--no-allow-list", action="store_true",
                        help="allow no cycle and no backend include (ALLOWED_CYCLES and "
                        "ALLOWED_BACKEND_INCLUDES are ignored)")
    args = parser.parse_args(argv)
    if not (args.root / "core").is_dir():
        print(f"check_layers: {args.root / 'core'} is not a directory", file=sys.stderr)
        return 2
    if args.no_allow_list:
        problems = check(args.root, {})
    else:
        problems = check(args.root, ALLOWED_CYCLES, ALLOWED_BACKEND_INCLUDES)
    for problem in problems:
        print(f"check_layers: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
