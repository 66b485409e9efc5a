"""PowerSGD gradient compression for torch (PyTorch's ``powerSGD_hook``): the algorithm of
``hora.common.powersgd`` on torch tensors. The random initial Q comes from torch's generator,
so it is the one PyTorch draws from the same seed.
"""

from __future__ import annotations

from typing import Any

import torch

from hora.common import powersgd
from hora.common.comm_hooks import GradBucket, HookFuture
from hora.torch import _hook_ops

_HALF_TYPES = (torch.float16, torch.bfloat16)


class TorchOps:
    """``hora.common.powersgd.ArrayOps`` for torch tensors."""

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype)

    def concat(self, arrays: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(arrays)

    def stack(self, arrays: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(arrays)

    def view(self, array: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return array.view(shape)

    def numel(self, array: torch.Tensor) -> int:
        return array.numel()

    def clone(self, array: torch.Tensor) -> torch.Tensor:
        return array.detach().clone()

    def copy(self, out: torch.Tensor, source: torch.Tensor) -> None:
        out.copy_(source)

    def divide(self, out: torch.Tensor, divisor: int) -> None:
        out.div_(divisor)

    def matmul(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.bmm(a, b, out=out)

    def transposed_matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # As (b^T a)^T: a transposed ``a`` takes a kernel many times slower.
        return torch.bmm(b.transpose(1, 2), a).transpose(1, 2)

    def matmul_transposed(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.bmm(a, b.transpose(1, 2), out=out)

    def column_norms(self, batch: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(batch, dim=1, keepdim=True)

    def column_sums(self, batch: torch.Tensor) -> torch.Tensor:
        return batch.sum(dim=1, keepdim=True)

    def has_qr(self, dtype: torch.dtype) -> bool:
        return dtype not in _HALF_TYPES  # QR has no half kernels

    def qr(self, batch: torch.Tensor) -> torch.Tensor:
        return torch.linalg.qr(batch)[0]

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    def standard_normal(self, generator: torch.Generator, shape: tuple[int, ...],
                        dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)

    def allreduce(self, arrays: list[torch.Tensor], names: list[str], op: int,
                  process_set: Any) -> Any:
        return _hook_ops.allreduce_tensors(arrays, names, op, process_set)

    def average(self, bucket: GradBucket) -> HookFuture:
        return _hook_ops.allreduce(bucket)


_OPS = TorchOps()


def orthogonalize(matrices: torch.Tensor, epsilon: float = 0.0) -> None:
    """Make the columns of each matrix of a (batch, rows, cols) tensor orthonormal, in place.

    Gram-Schmidt for at most two columns and for half types (QR has no half kernels), QR
    otherwise. ``epsilon`` is added to each column's norm before dividing by it (0: a column of
    zeros becomes NaN, as in PyTorch).
    """
    powersgd.orthogonalize(_OPS, matrices, epsilon)


class PowerSGD(powersgd.PowerSGDHook):
    """A communication hook compressing torch gradients to rank ``matrix_approximation_rank``.

    The options and their defaults are PyTorch's ``PowerSGDState``'s. ``error_dict``,
    ``p_memory_dict`` and ``q_memory_dict`` (per bucket index) hold the error-feedback
    residuals and the warm-start P and Q; ``iterations`` counts each bucket's reductions;
    ``initial_qs`` gives the random Q a bucket starts from. See ``hora.common.powersgd``.

    Raises:
        ValueError: ``matrix_approximation_rank`` below 1, or ``start_powerSGD_iter <= 1``
            with error feedback or warm start (PyTorch's rule).
    """

    ops = _OPS
