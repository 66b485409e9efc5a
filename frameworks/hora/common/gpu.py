"""Where the GPU path's libraries come from, and what it found.

The engine opens NCCL and the CUDA runtime at run time (never linked): the paths in
``HORA_NCCL_LIBRARY`` / ``HORA_CUDA_LIBRARY``, else the copies already in the process (a CUDA
build of torch loads them on import), else the loader's search path. Before the engine looks,
``ensure_loaded`` loads them from NVIDIA's wheels on ``sys.path`` (``nvidia-nccl-cu12`` and the
CUDA runtime wheels, as torch does), unless the process already holds a copy: never two NCCLs in
one process.
"""
from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hora import _core

# (library name in /proc/self/maps, paths inside site-packages, newest first)
_WHEEL_LIBRARIES = (
    ("libnccl.so", ("nvidia/nccl/lib/libnccl.so.2",)),
    ("libcudart.so", ("nvidia/cu13/lib/libcudart.so.13",
                      "nvidia/cuda_runtime/lib/libcudart.so.12")),
)
_loaded = False
_path_on: bool | None = None


def _in_process(name: str) -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            return any(name in line for line in maps)
    except OSError:
        return False


def _wheel_library(candidates: tuple[str, ...]) -> Path | None:
    for entry in sys.path:
        for relative in candidates:
            path = Path(entry or ".") / relative
            if path.is_file():
                return path
    return None


def ensure_loaded() -> None:
    """Load NCCL and the CUDA runtime from NVIDIA's wheels, when present and needed. Once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    overrides = {"libnccl.so": "NCCL_LIBRARY", "libcudart.so": "CUDA_LIBRARY"}
    for name, candidates in _WHEEL_LIBRARIES:
        var = overrides[name]
        if os.environ.get(f"HORA_{var}") or os.environ.get(f"HOROVOD_{var}"):
            continue
        if _in_process(name):
            continue
        path = _wheel_library(candidates)
        if path is not None:
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # the engine then reports the library as not found


def info() -> dict[str, Any]:
    """What the GPU path found: ``available``, ``reason`` (why not), ``nccl_loaded``,
    ``nccl_version``, ``nccl_library``, ``cuda_library`` and ``devices``."""
    ensure_loaded()
    return dict(_core.gpu_info())


def path_on() -> bool:
    """Whether CUDA tensors can go through NCCL in this process. The engine opens the libraries
    once per process, so the answer is asked once and kept."""
    global _path_on
    if _path_on is None:
        _path_on = bool(info()["available"])
    return _path_on


def nccl_runs(request: Mapping[str, Any]) -> bool:
    """Whether NCCL can run a collective with these enqueue arguments: the engine refuses Adasum
    and scale factors other than 1 for GPU tensors. Frontends whose GPU tensors used to go
    through host memory keep that path for such requests."""
    return (request.get("op") != int(_core.ReduceOp.ADASUM)
            and request.get("prescale", 1.0) == 1.0 and request.get("postscale", 1.0) == 1.0)


def is_cuda(tensor: Any) -> bool:
    """True for an object whose ``__dlpack_device__`` says CUDA (DLPack device type 2)."""
    probe = getattr(tensor, "__dlpack_device__", None)
    if probe is None:
        return False
    try:
        device = probe()
    except Exception:  # noqa: BLE001 - a producer that cannot tell is not a CUDA tensor here
        return False
    return int(device[0]) == 2
