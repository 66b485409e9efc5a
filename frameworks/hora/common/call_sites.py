"""Call sites: the user's ``file.py:line`` that submitted an operation, for stall and deadlock
reports."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, TypeVar

from hora import _core

T = TypeVar("T")

_HORA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Packages whose frames stand between a user's call and Hora (autograd's Function.apply, Keras
# layers, Gluon blocks): a call site names the first frame outside these and Hora.
_FRAMEWORK_PACKAGES = ("torch", "tensorflow", "keras", "tf_keras", "mxnet")


def _framework_dirs() -> list[str]:
    dirs = []
    for name in _FRAMEWORK_PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else None
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return dirs


def _frame_owner(filename: str) -> int:
    """0 for a user's file, 1 for a framework's, 2 for Hora's (the engine keeps each answer).

    A framework's file can only be on the stack once that framework is imported, so the
    directories loaded when a file is first seen decide it for good.
    """
    path = os.path.abspath(filename)
    if path.startswith(_HORA_DIR + os.sep):
        return 2
    if any(path.startswith(d) for d in _framework_dirs()):
        return 1
    return 0


_core.set_call_site_classifier(_frame_owner)

# call_site(skip=0) -> str: ``file.py:123`` of the caller's frame, the first one outside Hora and
# the frameworks (for a differentiable op the frame below Hora's is autograd's), else the first
# outside Hora. ``skip``: how many frames above the caller's are certainly Hora's own (the
# pipeline's functions that called it); the search starts above them without looking at them.
# The walk runs in the engine, which asks _frame_owner once per file (in Python it cost most of a
# microsecond per call).
call_site = _core.call_site

# give_call_site(site) -> str: ``site`` becomes this thread's call site until another is given
# ("" looks at the stack again); returns the one it replaced. A graph node runs on the
# framework's executor, with no user frame on the stack: it submits with the site that built it.
give_call_site = _core.give_call_site


def run_as_if_from(site: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with ``site`` as the call site of what it submits."""
    outer = give_call_site(site)
    try:
        return fn(*args)
    finally:
        give_call_site(outer)
