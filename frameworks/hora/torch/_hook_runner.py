"""How DistributedOptimizer drives a communication hook: one ``GradBucket`` per parameter (or
per group of ``groups``), the hook's future registered as an ordinary integer handle, and the
futures waited for in bucket order on every rank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import torch

from hora.common.comm_hooks import GradBucket, check_future, check_result
from hora.common.ops import AsyncResult, Average, register_handle
from hora.common.process_sets import ProcessSet
from hora.torch.compression import NoneCompressor


def check_comm_hook(comm_hook: Any, compression: Any, op: int, predivide: float) -> None:
    """Refuse options a communication hook cannot honour.

    Raises:
        TypeError: the hook is not callable.
        ValueError: gradient compression, an op other than Average or a predivide factor as
            well as a hook (the hook decides how gradients travel and returns their average).
    """
    if not callable(comm_hook):
        raise TypeError(
            f"comm_hook must be callable as hook(bucket) -> future, got {type(comm_hook).__name__}"
        )
    if compression is not NoneCompressor:
        raise ValueError("comm_hook and compression cannot be combined: compress inside the hook "
                         "(hora.torch.hooks.fp16_compress, bf16_compress)")
    if op != Average:
        raise ValueError("comm_hook returns averaged gradients: op must be Average")
    if predivide != 1.0:
        raise ValueError("comm_hook and gradient_predivide_factor cannot be combined")


class HookRunner:
    """Calls ``hook`` on the buckets of one optimizer and keeps their results until waited."""

    def __init__(self, hook: Callable[[GradBucket], Any], ordered: Sequence[torch.Tensor],
                 names: dict[torch.Tensor, str], process_set: ProcessSet) -> None:
        self._hook = hook
        self._position = {p: i for i, p in enumerate(ordered)}
        self._names = names
        self._process_set = process_set
        self._pending: dict[int, AsyncResult] = {}

    def start(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
              single: bool) -> int:
        """Call the hook on the bucket of ``params`` (gradients ``grads``, dense); returns an
        integer handle whose result is the reduced gradient (``single``) or the list of them.

        Raises:
            TypeError: the hook returned no future.
        """
        tensors = [g.detach() if g.is_contiguous() else g.detach().contiguous() for g in grads]
        index = self._position[params[0]]
        bucket = GradBucket(index, [self._names[p] for p in params], tensors, self._process_set)
        future = check_future(self._hook(bucket), bucket)

        def finish(_: list) -> Any:
            value = check_result(future.wait(), bucket, lambda v: isinstance(v, torch.Tensor),
                                 lambda v: tuple(v.shape))
            return value[0] if single else value

        result = AsyncResult([], finish)
        self._pending[index] = result
        return register_handle(result)

    def drive(self) -> None:
        """Wait for every bucket's future in index order (the same on every rank, so a second
        round of collectives that ``wait()`` starts cannot cross another rank's). Errors are
        kept in the results and raised when the optimizer collects them."""
        for index in sorted(self._pending):
            try:
                self._pending[index].wait()
            except Exception:  # noqa: BLE001, S110 (raised again when its handle is waited for)
                pass
        self._pending.clear()
