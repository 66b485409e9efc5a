"""Startup hook installed with Hora: the NumPy names MXNet 1.9.1 reads, restored before it loads.

``site`` imports this module at interpreter start (through ``hora_mxnet_numpy.pth`` next to it),
so a script that imports ``mxnet`` before ``hora.mxnet`` works on a NumPy that has dropped
``np.bool`` and the other names MXNet reads at import time. Start-up cost is one finder on
``sys.meta_path``: neither NumPy nor Hora is imported here. When something first looks up
``mxnet`` and an MXNet is installed, the finder loads ``hora/mxnet/compat.py`` by its path (not
the ``hora`` package, which would load the engine) and applies its ``patch_numpy()``, which only
adds names NumPy lacks. Any failure leaves the import to proceed exactly as without the hook.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_COMPAT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hora", "mxnet", "compat.py")


def _load_compat() -> ModuleType:
    loaded = sys.modules.get("hora.mxnet.compat")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("_hora_mxnet_compat", _COMPAT)
    if spec is None or spec.loader is None:
        raise ImportError(_COMPAT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MxnetNumpyAliases:
    """Meta path finder that never finds a module; it patches NumPy once before ``mxnet`` loads."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: Any = None) -> None:
        if name == "mxnet":
            _patch_before_mxnet(name, path)


def _patch_before_mxnet(name: str, path: Sequence[str] | None) -> None:
    try:
        # Only when an MXNet is actually installed: probing for it must not touch NumPy.
        if importlib.machinery.PathFinder.find_spec(name, path) is not None:
            uninstall()
            _load_compat().patch_numpy()
    except Exception:  # noqa: BLE001, S110 (without the names, MXNet's own error shows instead)
        pass


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once, unless MXNet is already loaded)."""
    if "mxnet" in sys.modules:
        return
    if not any(isinstance(finder, MxnetNumpyAliases) for finder in sys.meta_path):
        sys.meta_path.insert(0, MxnetNumpyAliases())


def uninstall() -> None:
    """Remove the finder from ``sys.meta_path``."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, MxnetNumpyAliases)]


install()
