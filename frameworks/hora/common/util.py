"""Helpers with the names ``horovod.common.util`` gives them (Horovod's test files and some user
scripts import them from there): version comparison and ``env``."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string (``2.21.0rc1`` -> ``(2, 21, 0)``)."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    parts = [int(p) for p in match.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def is_version_greater_equal_than(ver: str, target: str) -> bool:
    """True when version ``ver`` is at least ``target`` (release numbers compared).

    Raises:
        ValueError: an argument is not a string, or not a version.
    """
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(  # noqa: TRY004 (Horovod raises ValueError here)
            f"versions must be strings, got {type(ver).__name__} and "
            f"{type(target).__name__}")
    return _release(ver) >= _release(target)


@contextlib.contextmanager
def env(**variables: str | None) -> Iterator[None]:
    """Sets the given environment variables (a None value is skipped) for the ``with`` block,
    then puts back what was there before (unset stays unset)."""
    given = {name: value for name, value in variables.items() if value is not None}
    before = {name: os.environ.get(name) for name in given}
    os.environ.update(given)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
