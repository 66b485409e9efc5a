"""Inputs and NumPy references shared by the TensorFlow and MXNet communication-hook tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from conftest import make_input, seed_of

# Empty, one element, odd, a matrix, a 3-d tensor, a scalar, one larger than 64 KiB.
SHAPES: list[tuple[int, ...]] = [(0,), (1,), (17,), (5, 7), (3, 4, 5), (), (70001,)]
WIRE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def hook_input(r: int, i: int, key: str, shapes: list[tuple[int, ...]] = SHAPES) -> np.ndarray:
    """Rank r's gradient for shape i: for the allreduce hook multiples of 0.5 (an exact
    average); for the compressing hooks float32 values of magnitude in [1, 8) that the cast
    rounds and whose halves divided by the rank count sum exactly in float32."""
    if key.startswith("allreduce"):
        return np.asarray(make_input(r, shapes[i], "float32", "hooks", key, i))
    rng = np.random.default_rng(seed_of("hooks", key, r, i))
    magnitude = rng.uniform(1.0, 8.0, size=shapes[i])
    return np.asarray(magnitude * rng.choice([-1.0, 1.0], size=shapes[i]), dtype=np.float32)


def compressed_ref(arrays: list[np.ndarray], wire: type) -> np.ndarray:
    """PyTorch's fp16/bf16 hook in NumPy: cast, divide by the rank count in the half type
    (computed in float32, rounded once), sum (exact here), round once, cast back."""
    n = len(arrays)
    parts = [(a.astype(wire).astype(np.float32) / np.float32(n)).astype(wire) for a in arrays]
    total = np.sum([p.astype(np.float64) for p in parts], axis=0)
    return total.astype(wire).astype(np.float32)
