"""Communication hooks for ``hvd.DistributedOptimizer(..., comm_hook=hook)``.

A hook is a callable ``hook(bucket) -> future``: ``bucket`` is a ``GradBucket`` (``index``,
``names``, ``tensors``, ``process_set``) whose gradients are all ready, and ``future.wait()``
returns the averaged gradients, one tensor per gradient of the bucket, of the same shapes. A
bucket is one parameter, or one of the optimizer's ``groups``. The hooks here:

- ``allreduce``: the plain average (the optimizer's result without a hook, bit for bit);
- ``fp16_compress`` / ``bf16_compress``: PyTorch's ``fp16_compress_hook`` and
  ``bf16_compress_hook``: each gradient is cast to the half type, divided by the number of ranks
  in that type, summed in it, and cast back;
- ``PowerSGD(...)``: low-rank gradient compression (``hora.torch.powersgd``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from hora.common import ops
from hora.common.comm_hooks import GradBucket, HookFuture
from hora.torch._hook_ops import allreduce, allreduce_tensors
from hora.torch.powersgd import PowerSGD

__all__ = ["CommHook", "GradBucket", "HookFuture", "PowerSGD", "allreduce", "allreduce_tensors",
           "bf16_compress", "fp16_compress"]

CommHook = Callable[[GradBucket], Any]


def _compress_hook(bucket: GradBucket, wire: torch.dtype, label: str) -> HookFuture:
    sent = [t.to(wire).div_(bucket.size()) for t in bucket.tensors]
    names = [f"hooks.{label}.{n}" for n in bucket.names]
    work = allreduce_tensors(sent, names, ops.Sum, bucket.process_set)

    def finish() -> list[torch.Tensor]:
        work.wait()
        return [grad.copy_(s) for grad, s in zip(bucket.tensors, sent)]

    return HookFuture(finish)


def fp16_compress(bucket: GradBucket) -> HookFuture:
    """PyTorch's ``fp16_compress_hook``: cast to float16, divide by the number of ranks, sum in
    float16 and cast back into the gradients."""
    return _compress_hook(bucket, torch.float16, "fp16")


def bf16_compress(bucket: GradBucket) -> HookFuture:
    """PyTorch's ``bf16_compress_hook``: as ``fp16_compress`` with bfloat16."""
    return _compress_hook(bucket, torch.bfloat16, "bf16")
