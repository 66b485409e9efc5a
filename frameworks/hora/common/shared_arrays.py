"""NumPy arrays in this rank's part of the shared arena (``hora._core.shared_block``).

Over shared memory, a large allreduce of the whole job copies each rank's tensors into its
window first, unless a fused part of them lies in one run of the rank's arena: then the other
ranks read it there. Frontends that keep buffers of their own for the engine (TensorFlow's
private copies) take them from here; torch's DistributedOptimizer places gradients here
(``hora.torch._shared_grads``).
"""

from __future__ import annotations

import math

import numpy as np

from hora import _core


def enabled() -> bool:
    """Whether the arena may be used: this job has one (every rank on this host, over shared
    memory) and HORA_SHARED_GRADIENTS (HOROVOD_ alias) is not 0."""
    if (_core.lookup_env("SHARED_GRADIENTS") or "1").strip() == "0":
        return False
    return _core.shared_pool_info() is not None


def reserve(sizes: list[int], alignment: int) -> tuple[_core.SharedBlock, list[int]] | None:
    """One block of the arena holding runs of ``sizes`` bytes back to back, in order, each
    starting on an ``alignment`` boundary: the block and each run's offset, or None when the
    arena has no room."""
    offsets, at = [], 0
    for nbytes in sizes:
        offsets.append(at)
        at += (nbytes + alignment - 1) // alignment * alignment
    block = _core.shared_block(max(at, 1))
    return None if block is None else (block, offsets)


def slab(layout: list[tuple[tuple, np.dtype]], alignment: int) -> tuple[object, list] | None:
    """One block of the arena holding an array per ``(shape, dtype)`` of ``layout``, in order,
    each starting on an ``alignment`` boundary; None when the arena has no room.

    Returns the arrays' owner (a flat uint8 array over the block) and the arrays. Every array,
    and every view of one, has the owner as its ``base``: the block lives as long as any of them,
    and ``sys.getrefcount(owner)`` counts them.
    """
    sizes = [math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in layout]
    reserved = reserve(sizes, alignment)
    if reserved is None:
        return None
    block, offsets = reserved
    flat = np.frombuffer(memoryview(block), dtype=np.uint8)
    arrays = [flat[at:at + nbytes].view(dtype).reshape(shape)
              for (shape, dtype), at, nbytes in zip(layout, offsets, sizes)]
    return flat, arrays
