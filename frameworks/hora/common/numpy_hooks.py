"""Communication hooks on NumPy buckets, shared by the TensorFlow/Keras and MXNet optimizers.

Those frontends hand a hook a ``GradBucket`` whose ``tensors`` are C-contiguous, writable NumPy
arrays (copies of the framework's gradients); ``future.wait()`` returns the averaged arrays. The
hooks here are the NumPy forms of ``hora.torch.hooks``'s:

- ``allreduce``: the plain average (the optimizer's result without a hook);
- ``fp16_compress`` / ``bf16_compress``: cast to the half type, divide by the number of ranks in
  that type, sum in it, cast back (PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``);
- ``PowerSGD(...)``: low-rank compression (``hora.common.numpy_powersgd``).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from hora.common import ops
from hora.common.comm_hooks import GradBucket, HookFuture
from hora.common.ops import AsyncResult, Average, Sum


def allreduce_arrays(arrays: list[np.ndarray], names: list[str], op: int,
                     process_set: Any) -> AsyncResult:
    """Start one fused in-place allreduce of ``arrays`` named ``names`` (equal on every rank);
    ``wait()`` returns the arrays."""
    handles = ops.enqueue("allreduce", arrays, names=names, op=op, process_set=process_set)
    return AsyncResult(handles, lambda _: list(arrays))


def allreduce(bucket: GradBucket) -> HookFuture:
    """Average the bucket's arrays over its process set, in place."""
    names = [f"hooks.allreduce.{n}" for n in bucket.names]
    work = allreduce_arrays(bucket.tensors, names, Average, bucket.process_set)
    return HookFuture(work.wait)


def _compress_hook(bucket: GradBucket, wire: Any, label: str) -> HookFuture:
    # ml_dtypes and NumPy compute a half-type division in float32 and round once, as torch does.
    divisor = np.array(bucket.size(), dtype=wire)
    sent = [np.array(t.astype(wire) / divisor, dtype=wire, order="C") for t in bucket.tensors]
    names = [f"hooks.{label}.{n}" for n in bucket.names]
    work = allreduce_arrays(sent, names, Sum, bucket.process_set)

    def finish() -> list[np.ndarray]:
        work.wait()
        for grad, s in zip(bucket.tensors, sent):
            grad[...] = s.astype(grad.dtype)
        return list(bucket.tensors)

    return HookFuture(finish)


def fp16_compress(bucket: GradBucket) -> HookFuture:
    """Cast to float16, divide by the number of ranks, sum in float16 and cast back."""
    return _compress_hook(bucket, np.float16, "fp16")


def bf16_compress(bucket: GradBucket) -> HookFuture:
    """As ``fp16_compress`` with bfloat16 (``ml_dtypes.bfloat16`` on the wire)."""
    return _compress_hook(bucket, ml_dtypes.bfloat16, "bf16")
