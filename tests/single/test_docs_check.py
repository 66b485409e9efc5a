"""tests/docs/check_docs.py: the docs' code blocks must say whether a test runs them, the runnable
ones must pass, and the API reference must list exactly each module's __all__."""

from __future__ import annotations

import importlib.util
import sys
import types
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_docs", ROOT / "tests" / "docs" / "check_docs.py")
assert _spec is not None and _spec.loader is not None
check_docs = importlib.util.module_from_spec(_spec)
sys.modules["check_docs"] = check_docs  # dataclasses look their module up by name
_spec.loader.exec_module(check_docs)


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def _problems(tmp_path: Path, text: str) -> list[str]:
    blocks = check_docs.blocks_of(_page(tmp_path, text))
    return [p.split(": ", 1)[1] for p in check_docs.marker_problems(blocks)]


def test_every_block_needs_a_marker_and_a_not_run_needs_a_reason(tmp_path: Path) -> None:
    text = ("# t\n\n<!-- run: python -->\n```python\nprint(1)\n```\n\n"
            "```sh\nls\n```\n\n<!-- not run: -->\n```text\nout\n```\n\n"
            "<!-- not run: an output sample -->\n\n```text\nout\n```\n"
            "<!-- run: horarun -np two -->\n```python\npass\n```\n")
    problems = _problems(tmp_path, text)
    assert problems == [
        "code block without a <!-- run: ... --> or <!-- not run: why --> line before it",
        "'not run' must say why",
        ("unknown run marker 'horarun -np two' (python, sh, horarun -np N, each with an "
         "optional env=NAME)")]


def test_blocks_keep_their_line_language_and_environment(tmp_path: Path) -> None:
    text = ("intro\n\n- item\n\n    <!-- run: horarun -np 3 env=tensorflow -->\n"
            "    ```python\n    import os\n    ```\n")
    (block,) = check_docs.blocks_of(_page(tmp_path, text))
    assert (block.line, block.lang, block.marker, block.code) == (6, "python", "run", "import os\n")
    assert check_docs.parse_how(block.how) == (["horarun", "-np", "3"], "tensorflow")


def test_an_included_file_is_what_runs(tmp_path: Path) -> None:
    text = '<!-- run: python -->\n```python\n--8<-- "examples/pytorch/train_mlp.py"\n```\n'
    (block,) = check_docs.blocks_of(_page(tmp_path, text))
    assert check_docs.script_of(block) == (ROOT / "examples/pytorch/train_mlp.py").read_text()


def test_a_failing_block_is_reported_with_its_place_and_output(tmp_path: Path) -> None:
    text = ("<!-- run: python -->\n```python\nprint('fine')\n```\n\n"
            "<!-- run: sh -->\n```sh\necho about to fail; exit 3\n```\n")
    page = tmp_path / "docs" / "p.md"
    page.parent.mkdir()
    page.write_text(text)
    ok, bad = check_docs.blocks_of(page)
    ok.path = bad.path = ROOT / "docs" / "p.md"  # where() names paths under the repository
    assert check_docs.run_block(ok, sys.executable) == ""
    assert check_docs.run_block(bad, sys.executable) == \
        "docs/p.md:7: exit status 3\nabout to fail"


def _inventory(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "objects.inv"
    header = b"# Sphinx inventory version 2\n# Project: t\n# Version: 0\n# zlib below\n"
    path.write_bytes(header + zlib.compress("\n".join(lines).encode()))
    return path


def test_the_reference_must_list_exactly_the_public_names(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake_frontend")
    module.__all__ = ["allreduce", "elastic", "Sum"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_frontend", module)
    inv = _inventory(tmp_path, [
        "fake_frontend py:module 1 r/#$ -",
        "fake_frontend.allreduce py:function 1 r/#$ -",
        "fake_frontend.allreduce.x py:attribute 1 r/#$ -",  # a member's member: not a name
        "fake_frontend.elastic py:module 1 r/#$ -",  # a submodule in __all__ counts
        "fake_frontend.tools py:module 1 r/#$ -",  # one documented on its own page does not
        "fake_frontend._private py:function 1 r/#$ -",
        "fake_frontend.extra py:function 1 r/#$ -",
        "fake_frontend.page std:label -1 r/ page",
    ])
    args = types.SimpleNamespace(inventory=str(inv), modules=["fake_frontend"])
    assert check_docs.api(args) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["fake_frontend: 3 public names, 2 documented",
                   "fake_frontend.Sum: in __all__ but not in the API reference",
                   "fake_frontend.extra: in the API reference but not in __all__"]


def test_the_environment_page_lists_exactly_the_declared_variables() -> None:
    """docs/reference/environment.md has one row per variable of the engine's table
    (core/common/settings.cc), none missing and none extra."""
    import re

    from hora import _core

    text = (ROOT / "docs" / "reference" / "environment.md").read_text()
    documented = set(re.findall(r"^\| `HORA_([A-Z0-9_]+)`", text, re.MULTILINE))
    declared = {name for name, _default, _doc in _core.env_vars()}
    assert (sorted(declared - documented), sorted(documented - declared)) == ([], [])
