"""Helpers shared by the torch frontend tests: dtype tables and NumPy <-> torch conversion.

Inputs come from conftest.make_input (deterministic per rank), so every rank can build every
rank's tensor and compute the expected result locally.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import torch
import torch.distributed as dist
from conftest import FLOAT_DTYPES, assert_close, assert_same, make_input, size

TORCH_DTYPES: dict[str, torch.dtype] = {
    "uint8": torch.uint8,
    "int8": torch.int8,
    "uint16": torch.uint16,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "bool": torch.bool,
}


def to_torch(array: np.ndarray) -> torch.Tensor:
    """A tensor with the same values and dtype (bfloat16 from ml_dtypes included); a copy."""
    if array.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array).copy())


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values as a NumPy array (bfloat16 as ml_dtypes.bfloat16)."""
    t = tensor.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def torch_input(
    rank_: int, shape: Sequence[int] | int, dtype: str, *key: object, kind: str = "sum"
) -> torch.Tensor:
    """conftest.make_input as a tensor."""
    return to_torch(make_input(rank_, shape, dtype, *key, kind=kind))


def all_arrays(
    shape: Sequence[int] | int, dtype: str, *key: object, kind: str = "sum"
) -> list[np.ndarray]:
    """Every rank's input as NumPy arrays, in rank order."""
    return [make_input(r, shape, dtype, *key, kind=kind) for r in range(size())]


def float_input(rank_: int, shape: Sequence[int], *key: object) -> torch.Tensor:
    """Standard-normal float64 input for gradient tests."""
    return to_torch(make_input(rank_, shape, "float64", *key, kind="normal"))


DIST_OPS = {
    "sum": dist.ReduceOp.SUM,
    "average": dist.ReduceOp.AVG,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "product": dist.ReduceOp.PRODUCT,
}
"""torch.distributed's reductions by the names of conftest's references."""


def check_reduction(actual: torch.Tensor, expected: np.ndarray, dtype: str,
                    op: str = "sum") -> None:
    """A reduction's result against its NumPy reference: exact, but within one rounding for a
    floating-point average."""
    if dtype in FLOAT_DTYPES and op == "average":
        assert_close(to_numpy(actual), expected, dtype)
    else:
        assert_same(to_numpy(actual), expected, dtype)
