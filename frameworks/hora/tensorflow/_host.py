"""Host memory between TensorFlow and the engine: zero-copy where it is safe, one copy where
the engine must write.

- ``readable(x)``: what the engine may read in place: an eager CPU tensor itself (through its
  ``__dlpack__``), or a NumPy array it can export.
- ``private(x)``: a 64-byte aligned, writable copy for in-place operations (allreduce,
  broadcast), since TensorFlow tensors are immutable. A graph node keeps a ``PrivatePool``
  so that each run reuses the buffers of its earlier runs that nothing holds any more. Over
  shared memory the pool takes a node's buffers from the shared arena, one block per node, so
  the other ranks read them in place (``hora.common.shared_arrays``).
- ``to_tensor(array, dtype)``: an eager tensor over ``array``'s memory through DLPack when the
  array is contiguous and 64-byte aligned (TensorFlow's kernels assume that alignment; the
  engine's outputs and ``private`` buffers are), otherwise a copy. DLPack is also the faster
  way for small arrays (about 10 us against about 100 us for ``tf.convert_to_tensor``).

bfloat16 crosses as uint16 (NumPy has no DLPack code for it) and is bit-cast back.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from typing import Any

import ml_dtypes
import numpy as np
import tensorflow as tf

from hora.common import basics, shared_arrays
from hora.tensorflow import _device

ALIGNMENT = 64
_BF16 = np.dtype(ml_dtypes.bfloat16)


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def aligned_empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-_address(raw)) % ALIGNMENT
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def _on_cpu(tensor: tf.Tensor) -> bool:
    device = getattr(tensor, "device", "") or ""
    return device == "" or "CPU" in device


def host_view(x: Any) -> np.ndarray:
    """The values of ``x`` (eager tensor, array or scalar) as a NumPy array, without a copy
    when ``x`` is a CPU tensor or already an array. Read it only."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, tf.Tensor):
        if _on_cpu(x):
            try:
                if x.dtype == tf.bfloat16:
                    return np.from_dlpack(tf.bitcast(x, tf.uint16)).view(_BF16)
                return np.from_dlpack(x)
            except (BufferError, TypeError, ValueError, RuntimeError):
                pass
        return np.asarray(x.numpy())
    return np.asarray(x)


def readable(x: Any) -> Any:
    """What the engine can read in place: a CPU eager tensor itself, a NumPy array that can be
    exported (C-contiguous and writable, as NumPy < 2 does not export read-only arrays), or a
    copy otherwise."""
    if isinstance(x, tf.Tensor) and _on_cpu(x) and hasattr(x, "__dlpack__"):
        return x
    array = host_view(x)
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return private(array)


def private(x: Any) -> np.ndarray:
    """A writable, aligned host copy of ``x`` that the engine may overwrite."""
    view = host_view(x)
    buf = aligned_empty(view.shape, view.dtype)
    np.copyto(buf, view)
    return buf


class PrivatePool:
    """``private`` copies that one graph node makes on every run, reusing last run's buffers.

    A fresh 1 MB buffer per step costs its page faults and a return to the OS, more than the
    copy itself. A buffer is reused only when nothing but this pool refers to it or to the
    array that owns its memory: the wait node hands the buffer to TensorFlow as an output
    without a copy, and TensorFlow keeps a reference for as long as any tensor uses that
    memory (so does the engine while it works on it). Each source keeps up to two buffers, so
    a step may start while the previous step's results are still held.

    Where the job has a shared arena, a run's buffers are instead one block of it (a slab), laid
    out in source order, 64-byte aligned: a fused part that spans them is one run of memory when
    their sizes are multiples of 64 bytes, which the other ranks then read in place. Up to two
    slabs are kept, reused on the same terms.
    """

    __slots__ = ("__weakref__", "_lock", "_shared", "_slabs", "_slots")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[list[np.ndarray]] = []
        self._slabs: list[tuple[object, list[np.ndarray]]] = []
        self._shared: bool | None = None  # decided on the first run, once the job is running
        _POOLS.add(self)

    def release_shared(self) -> None:
        """Drop the slabs: the job whose arena holds them has ended. A graph that runs again
        in a later job decides afresh whether that job has an arena."""
        with self._lock:
            self._slabs.clear()
            self._shared = None

    def _take_slab(self, layout: list[tuple[tuple, np.dtype]]) -> list[np.ndarray] | None:
        for k in range(len(self._slabs)):
            arrays = self._slabs[k][1]
            # Free: each array referred to by the slab's list only, and the owner of their
            # memory by those arrays and the slab only (each count includes getrefcount's own
            # argument; indexing, not loop variables, so that no extra name refers to them).
            if ([(a.shape, a.dtype) for a in arrays] == layout
                    and all(sys.getrefcount(arrays[i]) == 2 for i in range(len(arrays)))
                    and sys.getrefcount(self._slabs[k][0]) == len(arrays) + 2):
                return arrays
        made = shared_arrays.slab(layout, ALIGNMENT)
        if made is None:
            return None
        if len(self._slabs) >= 2:
            self._slabs.pop(0)
        self._slabs.append(made)
        return made[1]

    def _take(self, index: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        while len(self._slots) <= index:
            self._slots.append([])
        slot = self._slots[index]
        for k in range(len(slot)):
            # Free: referred to by the pool's list and by its view only (each count includes
            # getrefcount's own argument).
            if (slot[k].shape == shape and slot[k].dtype == dtype
                    and sys.getrefcount(slot[k]) == 2 and sys.getrefcount(slot[k].base) == 2):
                return slot[k]
        fresh = aligned_empty(shape, dtype)
        if len(slot) >= 2:
            slot.pop(0)
        slot.append(fresh)
        return fresh

    def copies(self, sources: list) -> list[np.ndarray]:
        """A private copy of each of ``sources`` (the i-th in the i-th source's buffers)."""
        with self._lock:
            views = [host_view(x) for x in sources]
            if self._shared is None:
                self._shared = shared_arrays.enabled()
            out = None
            if self._shared:
                out = self._take_slab([(v.shape, v.dtype) for v in views])
            if out is None:
                out = [self._take(i, v.shape, v.dtype) for i, v in enumerate(views)]
            for buf, view in zip(out, views):
                np.copyto(buf, view)
        return list(out)


_POOLS: weakref.WeakSet[PrivatePool] = weakref.WeakSet()
"""Every live pool: graph nodes keep theirs for as long as their graph lives, which may be
longer than the job (a Keras model's compiled train function)."""


def _release_shared_slabs() -> None:
    """Shutdown hook: without it, a pool's slabs kept the ended job's arena mapped for as long
    as its graph lived."""
    for pool in list(_POOLS):
        pool.release_shared()


basics.add_shutdown_hook(_release_shared_slabs)


def as_numpy_dtype(array: np.ndarray, dtype: tf.DType) -> np.ndarray:
    """``array`` viewed or cast as ``dtype`` (engine bfloat16 results arrive as uint16)."""
    wanted = np.dtype(dtype.as_numpy_dtype)
    if array.dtype == wanted:
        return array
    if wanted == _BF16 and array.dtype == np.uint16:
        return array.view(_BF16)
    return array.astype(wanted)


def to_tensor(array: Any, dtype: tf.DType) -> tf.Tensor:
    """An eager tensor holding ``array`` (sharing its memory when that is safe), or the tensor
    of a GPU result (``_device``)."""
    if _device.is_result(array):
        return _device.to_tensor(array)
    array = as_numpy_dtype(np.asarray(array), dtype)
    if array.flags.c_contiguous and _address(array) % ALIGNMENT == 0:
        try:
            if dtype == tf.bfloat16:
                raw = tf.experimental.dlpack.from_dlpack(array.view(np.uint16).__dlpack__())
                return tf.bitcast(raw, tf.bfloat16)
            return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
        except (BufferError, TypeError, ValueError, RuntimeError):
            pass
    return tf.convert_to_tensor(array, dtype=dtype)
