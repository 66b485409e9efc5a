"""Running a communication hook over NumPy buckets: what the TensorFlow/Keras and MXNet
optimizers do with ``comm_hook=`` in place of their allreduce."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from hora.common.comm_hooks import GradBucket, check_future, check_result
from hora.common.process_sets import ProcessSet


def check_hook_options(comm_hook: Any, compressed: bool, op: int, average: int,
                       predivide: float, hooks_module: str) -> None:
    """Refuse options a communication hook cannot honour.

    Raises:
        TypeError: the hook is not callable.
        ValueError: wire compression, an op other than Average or a predivide factor as well as
            a hook (the hook decides how gradients travel and returns their average).
    """
    if not callable(comm_hook):
        raise TypeError(
            f"comm_hook must be callable as hook(bucket) -> future, got {type(comm_hook).__name__}"
        )
    if compressed:
        raise ValueError("comm_hook and compression cannot be combined: compress inside the hook "
                         f"({hooks_module}.fp16_compress, bf16_compress)")
    if op != average:
        raise ValueError("comm_hook returns averaged gradients: op must be Average")
    if predivide != 1.0:
        raise ValueError("comm_hook and gradient_predivide_factor cannot be combined")


def reduce_buckets(hook: Callable[[GradBucket], Any], buckets: Sequence[Sequence[int]],
                   names: Sequence[str], arrays: Sequence[np.ndarray],
                   process_set: ProcessSet, ids: Sequence[int] | None = None
                   ) -> list[np.ndarray]:
    """The reduced arrays: ``hook`` is called once per bucket (lists of positions in
    ``arrays``; a bucket's index is the id of its first position, ``ids[i]`` or ``i``, the same
    on every rank), every hook before any wait, then the futures are waited for in index
    order.

    Raises:
        TypeError, ValueError: the hook returned no future, or wrong tensors from ``wait()``.
    """
    out = list(arrays)
    started = []
    for positions in buckets:
        tensors = [np.array(arrays[i], order="C", copy=True) for i in positions]
        index = positions[0] if ids is None else int(ids[positions[0]])
        bucket = GradBucket(index, [names[i] for i in positions], tensors, process_set)
        started.append((positions, bucket, check_future(hook(bucket), bucket)))
    first_error: Exception | None = None
    for positions, bucket, future in sorted(started, key=lambda s: s[1].index):
        try:  # every future is waited for, so no collective is left in flight after an error
            values = check_result(future.wait(), bucket, lambda v: isinstance(v, np.ndarray),
                                  lambda v: v.shape)
        except Exception as exc:  # noqa: BLE001 (the first one is raised below)
            first_error = first_error or exc
            continue
        for i, value in zip(positions, values):
            out[i] = value
    if first_error is not None:
        raise first_error
    return out
