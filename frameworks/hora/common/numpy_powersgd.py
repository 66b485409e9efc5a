"""PowerSGD on NumPy buckets (the TensorFlow/Keras and MXNet form of ``hora.torch.powersgd``):
the algorithm of ``hora.common.powersgd`` on NumPy arrays. The random initial Q comes from
NumPy's generator seeded by ``initial_q_seed``, so it is the same on every rank (not the same
numbers as torch's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hora.common import numpy_hooks, powersgd
from hora.common.comm_hooks import GradBucket, HookFuture

_QR_TYPES = (np.float32, np.float64)


class NumpyOps:
    """``hora.common.powersgd.ArrayOps`` for NumPy arrays."""

    def empty(self, numel: int, dtype: Any) -> np.ndarray:
        return np.empty(numel, dtype)

    def concat(self, arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays)

    def stack(self, arrays: list[np.ndarray]) -> np.ndarray:
        return np.stack(arrays)

    def view(self, array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return array.reshape(shape)  # a view: the arrays are contiguous

    def numel(self, array: np.ndarray) -> int:
        return int(array.size)

    def clone(self, array: np.ndarray) -> np.ndarray:
        return array.copy()

    def copy(self, out: np.ndarray, source: np.ndarray) -> None:
        out[...] = source

    def divide(self, out: np.ndarray, divisor: int) -> None:
        np.divide(out, np.asarray(divisor, dtype=out.dtype), out=out)

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.matmul(a, b, out=out)

    def transposed_matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.matmul(a.transpose(0, 2, 1), b)

    def matmul_transposed(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        out[...] = np.matmul(a, b.transpose(0, 2, 1))

    def column_norms(self, batch: np.ndarray) -> np.ndarray:
        return np.sqrt(np.sum(batch * batch, axis=1, keepdims=True))

    def column_sums(self, batch: np.ndarray) -> np.ndarray:
        return np.sum(batch, axis=1, keepdims=True)

    def has_qr(self, dtype: Any) -> bool:
        return np.dtype(dtype).type in _QR_TYPES

    def qr(self, batch: np.ndarray) -> np.ndarray:
        return np.linalg.qr(batch)[0]

    def generator(self, seed: int) -> np.random.Generator:
        return np.random.default_rng(seed)

    def standard_normal(self, generator: np.random.Generator, shape: tuple[int, ...],
                        dtype: Any) -> np.ndarray:
        return generator.standard_normal(shape, dtype=np.float32).astype(dtype)

    def allreduce(self, arrays: list[np.ndarray], names: list[str], op: int,
                  process_set: Any) -> Any:
        return numpy_hooks.allreduce_arrays(arrays, names, op, process_set)

    def average(self, bucket: GradBucket) -> HookFuture:
        return numpy_hooks.allreduce(bucket)


class PowerSGD(powersgd.PowerSGDHook):
    """A communication hook compressing NumPy gradients to rank ``matrix_approximation_rank``.

    Options, defaults, state (``error_dict``, ``p_memory_dict``, ``q_memory_dict``,
    ``iterations``), ``initial_qs`` and ``compression_stats()`` as ``hora.torch.hooks.PowerSGD``.

    Raises:
        ValueError: ``matrix_approximation_rank`` below 1, or ``start_powerSGD_iter <= 1``
            with error feedback or warm start (PyTorch's rule).
    """

    ops = NumpyOps()
