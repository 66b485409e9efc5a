"""Checks the documentation site beyond what `mkdocs build --strict` checks.

  check_docs.py snippets [--env NAME --python PY] [--list] [--no-run] [FILE.md...]
      Every fenced code block under docs/ and in README.md must follow a marker line saying
      whether a test runs it:
        <!-- run: python -->              a whole script, run in one process
        <!-- run: horarun -np N -->       a whole script, run on N ranks by horarun
        <!-- run: sh -->                  shell lines, run by bash from the repository's root
        <!-- not run: why -->             never run, and why (an output sample, needs a cluster, ...)
      A run marker may end in `env=NAME` (tensorflow, mxnet, ...): such blocks run only when the
      same --env is given, with that --python; the others run with --env main (the default).
      A block whose only line is `--8<-- "path"` runs the file it includes.
  check_docs.py api INVENTORY MODULE...
      The API reference (mkdocstrings' objects.inv) documents exactly each module's __all__.
Exits 1 with one line per problem.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_SECONDS = 180  # one snippet; the longest are short training loops
MARKER = re.compile(r"^\s*<!--\s*(run|not run):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
INCLUDE = re.compile(r'^\s*--8<--\s*"([^"]+)"\s*$')


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    marker: str  # "run", "not run" or "" when missing
    how: str  # what follows the marker's colon
    code: str

    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced code blocks of one Markdown file, each with the marker line before it."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        body = [line.removeprefix(indent) for line in lines[i + 1:j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mm = MARKER.match(lines[k]) if k >= 0 else None
        found.append(Block(path, i + 1, lang, mm.group(1) if mm else "", mm.group(2) if mm else "",
                           "\n".join(body) + "\n"))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    """The blocks of the site's pages and of README.md, which makes the same promises."""
    pages = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    return [b for p in pages for b in blocks_of(p)]


def parse_how(how: str) -> tuple[list[str], str]:
    """A run marker's command words and environment name."""
    words = how.split()
    env = "main"
    for w in list(words):
        if w.startswith("env="):
            env = w[4:]
            words.remove(w)
    return words, env


def marker_problems(blocks: list[Block]) -> list[str]:
    problems = []
    for b in blocks:
        if not b.marker:
            problems.append(f"{b.where()}: code block without a <!-- run: ... --> or "
                            "<!-- not run: why --> line before it")
        elif b.marker == "not run" and len(b.how) < 4:
            problems.append(f"{b.where()}: 'not run' must say why")
        elif b.marker == "run":
            words, _ = parse_how(b.how)
            ok = words in (["python"], ["sh"]) or (
                len(words) == 3 and words[:2] == ["horarun", "-np"] and words[2].isdigit())
            if not ok:
                problems.append(f"{b.where()}: unknown run marker '{b.how}' (python, sh, "
                                "horarun -np N, each with an optional env=NAME)")
    return problems


def script_of(b: Block) -> str:
    m = INCLUDE.match(b.code.strip())
    return (ROOT / m.group(1)).read_text() if m else b.code


def run_block(b: Block, python: str) -> str:
    """Runs one block; returns '' or what went wrong."""
    words, _ = parse_how(b.how)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        # What a block makes with mktemp or tempfile goes here, and is removed with it.
        env["TMPDIR"] = tmp
        if words == ["sh"]:
            cmd = ["bash", "-euo", "pipefail", "-c", script_of(b)]
            env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
        else:
            script = Path(tmp) / "snippet.py"
            script.write_text(script_of(b))
            cmd = [python, str(script)]
            if words[0] == "horarun":
                cmd = [python, "-m", "hora.runner", "-np", words[2]] + cmd
        try:
            r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=RUN_SECONDS, check=False)
        except subprocess.TimeoutExpired:
            return f"{b.where()}: still running after {RUN_SECONDS} s"
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        return f"{b.where()}: exit status {r.returncode}\n{tail}"
    return ""


def snippets(args: argparse.Namespace) -> int:
    blocks = [b for f in args.files for b in blocks_of(Path(f).resolve())] or all_blocks()
    problems = marker_problems(blocks)
    runnable = [b for b in blocks if b.marker == "run" and not marker_problems([b])]
    mine = [] if args.no_run else [b for b in runnable if parse_how(b.how)[1] == args.env]
    if args.list:
        for b in blocks:
            print(f"{b.where()}: {b.marker or 'UNMARKED'}: {b.how}")
        return 0
    for b in mine:
        print(f"running {b.where()} ({b.how})", flush=True)
        problem = run_block(b, args.python)
        if problem:
            problems.append(problem)
    envs = sorted({parse_how(b.how)[1] for b in runnable})
    print(f"{len(blocks)} code blocks: {len(runnable)} run by a test (environments: "
          f"{', '.join(envs)}), {sum(b.marker == 'not run' for b in blocks)} marked not run; "
          f"ran {len(mine)} here (env {args.env})")
    for p in problems:
        print(p)
    return 1 if problems else 0


def inventory_roles(path: Path) -> dict[str, str]:
    """Python object name -> role ("py:function", "py:module", ...) of a Sphinx-format
    objects.inv (a 4-line header, then zlib-compressed lines "name role priority uri text")."""
    raw = path.read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = raw.index(b"\n", header_end) + 1
    body = zlib.decompress(raw[header_end:]).decode()
    roles = {}
    for line in body.splitlines():
        fields = line.split(" ")
        if len(fields) >= 2 and fields[1].startswith("py:"):
            roles[fields[0]] = fields[1]
    return roles


def api(args: argparse.Namespace) -> int:
    if not Path(args.inventory).is_file():
        print(f"{args.inventory}: no such inventory; build the site first (mkdocs build)")
        return 1
    roles = inventory_roles(Path(args.inventory))
    problems = []
    for module in args.modules:
        mod = __import__(module, fromlist=["__all__"])
        public = set(mod.__all__)
        children = {n[len(module) + 1:]: role for n, role in roles.items()
                    if n.startswith(module + ".") and "." not in n[len(module) + 1:]}
        # A subpackage documented on its own page is a child by name only.
        documented = {n for n, role in children.items()
                      if not n.startswith("_") and (role != "py:module" or n in public)}
        for n in sorted(public - documented):
            problems.append(f"{module}.{n}: in __all__ but not in the API reference")
        for n in sorted(documented - public):
            problems.append(f"{module}.{n}: in the API reference but not in __all__")
        print(f"{module}: {len(public)} public names, {len(public & documented)} documented")
    for p in problems:
        print(p)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("snippets")
    s.add_argument("--env", default="main")
    s.add_argument("--python", default=sys.executable)
    s.add_argument("--list", action="store_true", help="list the blocks and their markers")
    s.add_argument("--no-run", action="store_true", help="check the markers only")
    s.add_argument("files", nargs="*",
                   help="only these Markdown files (default: docs/ and README.md)")
    a = sub.add_parser("api")
    a.add_argument("inventory")
    a.add_argument("modules", nargs="+")
    args = parser.parse_args()
    return snippets(args) if args.what == "snippets" else api(args)


if __name__ == "__main__":
    sys.exit(main())
