"""Eager GPU tensors to and from the engine as CUDA tensors, so that NCCL runs their collectives.

TensorFlow exposes none of its streams, so a GPU tensor is handed over only after
``tf.test.experimental.sync_devices()``, TensorFlow's documented wait for every operation queued
on its GPUs: one host sync per call, the price of ordering without a stream. The engine's handle
completes only once NCCL's work has finished on the device, so results need no further wait.
In-place collectives (allreduce, broadcast) work on a fresh device copy (``DeepCopy``), since
TensorFlow tensors are immutable; results the engine allocates come back through DLPack.

This covers eager tensors only: inside a ``tf.function`` the collectives are host nodes, and
TensorFlow copies GPU tensors to and from them. GPU tensors also go through host memory when the
GPU path is off or NCCL cannot run the request (``hora.common.gpu.nccl_runs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from hora import _core
from hora.common import gpu


def ordinal(tensor: Any) -> int | None:
    """The GPU index of an eager tensor placed on a GPU, else None."""
    if not isinstance(tensor, tf.Tensor) or not hasattr(tensor, "__dlpack__"):
        return None  # a NumPy array (inside a graph) or a symbolic tensor
    device = tensor.device or ""
    if "GPU" not in device:
        return None
    index = tf.DeviceSpec.from_string(device).device_index
    return 0 if index is None else int(index)


def takes(sources: Sequence[Any], request: Mapping[str, Any]) -> bool:
    """Whether ``sources`` go to the engine as CUDA tensors: all on GPUs, the GPU path on, and
    a request NCCL can run."""
    return (bool(sources) and all(ordinal(x) is not None for x in sources)
            and gpu.nccl_runs(request) and gpu.path_on())


class Export:
    """An eager GPU tensor as the engine receives it; exported when the engine asks."""

    __slots__ = ("_device", "tensor")

    def __init__(self, tensor: tf.Tensor) -> None:
        self.tensor = tensor
        self._device = ordinal(tensor)

    def __dlpack__(self, stream: Any = None) -> Any:
        # No stream to order after: wait for the device instead, then hand the memory over.
        tf.test.experimental.sync_devices()
        return tf.experimental.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, int(self._device or 0))


def readable(tensor: tf.Tensor) -> Export:
    """``tensor`` for the engine to read in place."""
    return Export(tensor)


def writable(tensor: tf.Tensor) -> Export:
    """A fresh copy of ``tensor`` on its device, which the engine overwrites with the result."""
    with tf.device(tensor.device):
        return Export(tf.raw_ops.DeepCopy(x=tensor))


def is_result(out: Any) -> bool:
    """Whether ``out`` is a device result: an ``Export`` written in place or an engine-made one."""
    return isinstance(out, (Export, _core.DeviceTensor))


def to_tensor(out: Any) -> tf.Tensor:
    """The eager tensor of a device result (on its GPU, no copy)."""
    if isinstance(out, Export):
        return out.tensor
    return tf.experimental.dlpack.from_dlpack(out.__dlpack__())
