"""Helpers with the names ``horovod.common.util`` gives them (Horovod's test files and some user
scripts import them from there): version comparison, ``env`` and the build queries
(``gloo_built``, ``mpi_built``, ... with Horovod's ``verbose`` parameter)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from hora.common import basics


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


def _built(query: Callable[[], Any]) -> Callable[..., Any]:
    """``horovod.common.util``'s spelling of a build query: it takes ``verbose``, which Hora's
    queries do not need (they never load a framework extension)."""

    def built(verbose: bool = False) -> Any:
        del verbose
        return query()

    built.__name__ = query.__name__
    built.__doc__ = query.__doc__
    return built


mpi_built = _built(basics.mpi_built)
gloo_built = _built(basics.gloo_built)
nccl_built = _built(basics.nccl_built)
ddl_built = _built(basics.ddl_built)
ccl_built = _built(basics.ccl_built)
