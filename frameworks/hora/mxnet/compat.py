"""Importing MXNet 1.9.1 (the last release) on a current NumPy.

MXNet 1.9.1 reads NumPy names at import time that NumPy has since removed: ``np.bool`` and
``np.int`` (gone in NumPy 1.24), the constants ``PZERO``, ``NINF``, ... and the aliases
``alltrue``, ``sometrue``, ``product``, ... (gone in NumPy 2.0), and the financial functions
(``mirr``, ``npv``, ...; gone in 1.20, kept as raising stubs until 2.0). ``import_mxnet()`` puts
back the names the installed NumPy lacks, with their old meaning, and then imports MXNet. Names
NumPy still has are left alone, so NumPy behaves as before for every other library in the process.
``patch_numpy()`` also runs from the start-up hook ``_hora_mxnet_numpy`` (installed with the
wheel) when a script imports ``mxnet`` itself before ``hora.mxnet``; it imports nothing but NumPy.
"""

from __future__ import annotations

import builtins
import importlib
import math
import warnings
from types import ModuleType
from typing import Any, Callable

import numpy as np

INSTALL_HINT = (
    "hora.mxnet needs MXNet 1.9.1 with NumPy 1.x: "
    "pip install mxnet==1.9.1 'numpy<2'"
)

_FINANCIAL = ("mirr", "npv", "pmt", "ppmt", "pv", "rate")


def _financial_stub(name: str) -> Callable[..., Any]:
    def removed(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"numpy.{name} was removed from NumPy (NEP 32); use numpy_financial.{name} instead"
        )

    removed.__name__ = name
    removed.__qualname__ = name
    return removed


def _in1d(ar1: Any, ar2: Any, assume_unique: bool = False, invert: bool = False) -> np.ndarray:
    return np.isin(ar1, ar2, assume_unique=assume_unique, invert=invert).ravel()


def _msort(a: Any) -> np.ndarray:
    return np.sort(a, axis=0)


def _trapz(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1) -> Any:
    return np.trapezoid(y, x=x, dx=dx, axis=axis)  # type: ignore[attr-defined]


def _replacements() -> dict[str, Callable[[], Any]]:
    """The value each removed name had, built lazily (only for names that are missing)."""
    table: dict[str, Callable[[], Any]] = {
        "bool": lambda: builtins.bool,
        "int": lambda: builtins.int,
        "PZERO": lambda: 0.0,
        "NZERO": lambda: -0.0,
        "PINF": lambda: math.inf,
        "NINF": lambda: -math.inf,
        "Inf": lambda: math.inf,
        "NAN": lambda: math.nan,
        "NaN": lambda: math.nan,
        "alltrue": lambda: np.all,
        "sometrue": lambda: np.any,
        "product": lambda: np.prod,
        "round_": lambda: np.round,
        "in1d": lambda: _in1d,
        "trapz": lambda: _trapz,
        "msort": lambda: _msort,
    }
    for name in _FINANCIAL:
        table[name] = lambda name=name: _financial_stub(name)
    return table


def _present(module: ModuleType, name: str) -> bool:
    """Whether ``module.name`` resolves, without the deprecation warnings NumPy gives on access."""
    if name in vars(module):
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(module, name)
        except AttributeError:
            return False
    return True


def patch_numpy() -> list[str]:
    """Put back on ``numpy`` the removed names MXNet 1.9.1 reads; returns the names added.

    Idempotent. Names NumPy still provides, even as deprecated aliases or raising stubs, are not
    touched; the financial functions put back raise NotImplementedError naming numpy_financial.
    """
    added = []
    for name, make in _replacements().items():
        if not _present(np, name):
            setattr(np, name, make())
            added.append(name)
    return added


_mxnet: ModuleType | None = None


def import_mxnet() -> ModuleType:
    """Patch NumPy as needed and import ``mxnet``; returns the module.

    Raises:
        ImportError: MXNet is not installed or cannot be imported; the message says what to
            install.
    """
    global _mxnet
    if _mxnet is not None:
        return _mxnet
    patch_numpy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            module = importlib.import_module("mxnet")
    except ImportError as exc:
        raise ImportError(
            f"{INSTALL_HINT} (importing mxnet failed: {exc}; NumPy {np.__version__} is installed)"
        ) from exc
    except Exception as exc:  # MXNet fails at import with AttributeError etc. on a newer NumPy
        raise ImportError(
            f"{INSTALL_HINT} (importing mxnet raised {type(exc).__name__}: {exc}; "
            f"NumPy {np.__version__} is installed)"
        ) from exc
    _mxnet = module
    return module
