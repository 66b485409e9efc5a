"""Communication hooks for ``hvd.DistributedGradientTape(tape, comm_hook=hook)`` and
``hvd.DistributedOptimizer(opt, comm_hook=hook)`` (eager mode).

A hook is ``hook(bucket) -> future`` as in ``hora.torch.hooks``; here a bucket's ``tensors``
are NumPy arrays (copies of the gradients) and ``future.wait()`` returns the averaged arrays.
A bucket is one gradient, or one of the optimizer's ``groups``. The hooks (shared with
``hora.mxnet.hooks``): ``allreduce``, ``fp16_compress``, ``bf16_compress`` and
``PowerSGD(...)``, with the parameters and semantics of the torch ones.
"""

from __future__ import annotations

from hora.common.comm_hooks import GradBucket, HookFuture
from hora.common.numpy_hooks import allreduce, allreduce_arrays, bf16_compress, fp16_compress
from hora.common.numpy_powersgd import PowerSGD

__all__ = ["GradBucket", "HookFuture", "PowerSGD", "allreduce", "allreduce_arrays",
           "bf16_compress", "fp16_compress"]
