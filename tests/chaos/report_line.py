"""How a chaos worker prints the lines the runner parses."""

from __future__ import annotations

import sys


def say(line: str) -> None:
    """One whole line in one write. The runner merges the engine's log (stderr, written from other
    threads) into the same pipe and runs Python unbuffered, where print() writes the text and its
    newline separately, so a log line could land between them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
