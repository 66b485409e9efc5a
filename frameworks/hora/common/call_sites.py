"""Call sites: the user's ``file.py:line`` that submitted an operation, for stall and deadlock
reports."""

from __future__ import annotations

import functools
import os
import sys
from types import FrameType

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


@functools.lru_cache(maxsize=1024)
def _frame_owner(filename: str) -> int:
    """0 for a user's file, 1 for a framework's, 2 for Hora's (cached per file name).

    A framework's file can only be on the stack once that framework is imported, so the
    directories loaded when a file is first seen decide it for good.
    """
    path = os.path.abspath(filename)
    if path.startswith(_HORA_DIR + os.sep):
        return 2
    if any(path.startswith(d) for d in _framework_dirs()):
        return 1
    return 0


@functools.lru_cache(maxsize=1024)
def _base_name(filename: str) -> str:
    return os.path.basename(filename)


def call_site(skip: int = 0) -> str:
    """``file.py:123`` of the caller's frame: the first one outside Hora and the frameworks
    (for a differentiable op the frame below Hora's is autograd's), else the first outside
    Hora.

    ``skip``: how many frames above the caller's are certainly Hora's own (the pipeline's
    functions that called it); the search starts above them without looking at them. Every
    frame looked at costs a Python frame object and a lookup, about 0.15 us each.
    """
    try:
        frame: FrameType | None = sys._getframe(1 + skip)
    except ValueError:  # fewer frames than announced: look at every one
        frame = sys._getframe(1)
    fallback = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        owner = _frame_owner(filename)
        if owner == 0:
            return f"{_base_name(filename)}:{frame.f_lineno}"
        if owner == 1 and not fallback:
            fallback = f"{_base_name(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return fallback
