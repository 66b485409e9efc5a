"""Communication hooks for ``hvd.DistributedOptimizer(optax_transformation, comm_hook=hook)``.

A hook is ``hook(bucket) -> future`` as in ``hora.torch.hooks``; here a bucket holds NumPy copies
of every gradient leaf of one ``update`` (one bucket per step, so PowerSGD batches the matrices of
the whole model) and ``future.wait()`` returns the averaged arrays. The hooks (shared with
``hora.tensorflow.hooks`` and ``hora.mxnet.hooks``): ``allreduce``, ``fp16_compress``,
``bf16_compress`` and ``PowerSGD(...)``, with the parameters and semantics of the torch ones.
A hook runs eagerly: ``update`` with a hook is refused inside ``jax.jit``.
"""

from __future__ import annotations

from hora.common.comm_hooks import GradBucket, HookFuture
from hora.common.numpy_hooks import allreduce, allreduce_arrays, bf16_compress, fp16_compress
from hora.common.numpy_powersgd import PowerSGD

__all__ = ["GradBucket", "HookFuture", "PowerSGD", "allreduce", "allreduce_arrays",
           "bf16_compress", "fp16_compress"]
