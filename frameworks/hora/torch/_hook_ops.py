"""The collective every torch communication hook is built from, and the plain-average hook."""

from __future__ import annotations

from typing import Any

import torch

from hora.common.comm_hooks import GradBucket, HookFuture
from hora.common.ops import Average
from hora.torch._async_ops import call


def allreduce_tensors(tensors: list[torch.Tensor], names: list[str], op: int,
                      process_set: Any) -> Any:
    """Start one fused in-place allreduce of ``tensors`` named ``names`` (equal on every rank);
    returns a result whose ``wait()`` gives the tensors."""
    return call("allreduce", tensors, True, "comm_hook", in_place=True, names=names, op=op,
                process_set=process_set)


def allreduce(bucket: GradBucket) -> HookFuture:
    """Average the bucket's gradients over its process set (the optimizer's default)."""
    names = [f"hooks.allreduce.{n}" for n in bucket.names]
    work = allreduce_tensors(bucket.tensors, names, Average, bucket.process_set)
    return HookFuture(lambda: list(work.wait()))
