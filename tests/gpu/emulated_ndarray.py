"""A stand-in for MXNet's GPU NDArrays over the GPU emulation, for the MXNet GPU tests.

A CPU build of MXNet cannot make a GPU NDArray. ``EmuNDArray`` is a real NDArray (so type checks,
``shape``, ``dtype`` and ``stype`` are MXNet's own) whose values live in emulated device memory
(an ``EmuTensor``) and whose context is ``mx.gpu(device)``. It exports them the way MXNet
documents for a GPU array: ``to_dlpack_for_read`` and ``to_dlpack_for_write`` first wait for the
array's pending writes (MXNet's engine completes a GPU operator only once its stream finished),
then return a CUDA DLPack capsule of the device memory. A value written late (``delay_ms``) is a
pending write. ``copy`` copies on the "device"; ``from_dlpack`` imports a CUDA capsule as MXNet's
``mx.nd.from_dlpack`` does in a GPU build. Every array records the calls made on it, so a test can
tell the device path from a host copy (``asnumpy``).
"""
from __future__ import annotations

from typing import Any

import mxnet as mx
import numpy as np
from emulated_tensor import EmuTensor, read_capsule

# id(array) -> (its device memory, the calls made on it). NDArray has fixed slots, so the
# stand-in keeps its own state here instead of in attributes.
_STATE: dict[int, tuple[EmuTensor, list[str]]] = {}


class EmuNDArray(mx.nd.NDArray):
    """An NDArray on ``mx.gpu(device)`` whose values are in emulated device memory."""

    __slots__ = ()

    @classmethod
    def make(cls, values: np.ndarray, device: int, delay_ms: int = 0) -> EmuNDArray:
        """``values`` on GPU ``device``, written by a producer that finishes after ``delay_ms``."""
        carrier = mx.nd.empty(values.shape, dtype=values.dtype)  # shape, dtype and stype
        carrier.__class__ = cls
        memory = EmuTensor.from_numpy(np.ascontiguousarray(values), device=device,
                                      delay_ms=delay_ms)
        _STATE[id(carrier)] = (memory, [])
        return carrier  # type: ignore[return-value]

    def __del__(self) -> None:
        _STATE.pop(id(self), None)
        super().__del__()

    @property
    def memory(self) -> EmuTensor:
        return _STATE[id(self)][0]

    @property
    def calls(self) -> list[str]:
        return _STATE[id(self)][1]

    @property
    def context(self) -> Any:
        return mx.gpu(self.memory.device)

    ctx = context

    def _export(self, call: str) -> Any:
        self.calls.append(call)
        # MXNet's WaitToRead / WaitToWrite: the pending writes finish first.
        self.memory.lib.cudaStreamSynchronize(self.memory.stream)
        return self.memory.__dlpack__()

    def to_dlpack_for_read(self) -> Any:
        return self._export("to_dlpack_for_read")

    def to_dlpack_for_write(self) -> Any:
        return self._export("to_dlpack_for_write")

    def asnumpy(self) -> np.ndarray:
        self.calls.append("asnumpy")
        return self.memory.numpy()

    def copy(self) -> EmuNDArray:
        self.calls.append("copy")
        return EmuNDArray.make(self.memory.numpy(), self.memory.device)

    def values(self) -> np.ndarray:
        """The values in device memory once the array's own producer finished, without waiting
        for any stream of Hora's (for checking results)."""
        return self.memory.numpy()


def from_dlpack(capsule: Any, cpu_import: Any) -> Any:
    """``mx.nd.from_dlpack`` of a GPU build: a CUDA capsule becomes an ``EmuNDArray`` on its
    device; a CPU capsule goes to ``cpu_import``."""
    imported = read_capsule(capsule)
    if imported is None:
        return cpu_import(capsule)
    values, device = imported
    return EmuNDArray.make(values, device)
