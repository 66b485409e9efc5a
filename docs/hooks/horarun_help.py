"""MkDocs hook: a page line `<!-- horarun --help -->` becomes horarun's help text, taken from its
argument parser at build time, so the reference cannot drift from the launcher."""

from __future__ import annotations

import os
import re
from typing import Any

PLACEHOLDER = re.compile(r"^<!-- horarun --help -->$", re.MULTILINE)


def help_text() -> str:
    try:
        from hora.runner.launch import build_parser
    except ImportError as e:
        raise RuntimeError("the horarun reference is generated from hora's own parser: install "
                           f"hora (pip install .) before building the docs ({e})") from e
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page has a fixed width
    return build_parser().format_help()


def on_page_markdown(markdown: str, **_: Any) -> str:
    if not PLACEHOLDER.search(markdown):
        return markdown
    block = "```text\n" + help_text().rstrip() + "\n```"
    return PLACEHOLDER.sub(lambda _m: block, markdown)
