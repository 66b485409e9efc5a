"""Helpers shared by the hora.jax tests: JAX arrays from and to NumPy, and the rank checks.

Importing this module turns on ``jax_enable_x64`` (int64 and float64 exist in JAX only with it)
and skips the importing test module where JAX is missing.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rank, reducescatter_rows, size

jax = pytest.importorskip("jax")
jnp = jax.numpy

jax.config.update("jax_enable_x64", True)


def jx(x: np.ndarray) -> jax.Array:
    """A JAX array copy of ``x`` with its dtype."""
    return jnp.asarray(x)


def host(x: jax.Array) -> np.ndarray:
    """``x`` as a NumPy array, checking first that it is a JAX array."""
    assert isinstance(x, jax.Array), f"expected a jax.Array, got {type(x).__name__}"
    return np.asarray(x)


def require_ranks(n: int) -> None:
    """Skip on every rank alike when the job has fewer than ``n`` ranks."""
    if size() < n:
        pytest.skip(f"needs at least {n} ranks")


def my_rows(dim0: int) -> slice:
    """This rank's rows of a reducescatter result over ``dim0`` rows."""
    rows = reducescatter_rows(dim0, size())
    start = sum(rows[:rank()])
    return slice(start, start + rows[rank()])
