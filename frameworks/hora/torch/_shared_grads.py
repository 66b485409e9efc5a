"""Gradients that live in the shared arena, so that the other ranks read them in place.

Over shared memory, a large allreduce copies each rank's tensors into its window before the
ranks reduce them together. A gradient that already lies in the rank's part of the shared arena
(``hora._core.shared_block``) skips that copy: the other ranks read it where it is, as long as
each fused part of the allreduce is one run of memory there.

Autograd accumulates into an existing ``p.grad`` in place, but ``zero_grad()`` (set_to_none=True,
torch's and Horovod's default) drops it, and the next backward makes a new one. So the gradients
move into the arena only once they are seen to stay: when two steps in a row reduced the very
same gradient tensors (``zero_grad(set_to_none=False)``, or no zeroing). Then each dense gradient
is copied into one block per dtype, packed in the order this step submitted them (the order the
engine fuses them in), and ``p.grad`` becomes a view into its block, as with DDP's
``gradient_as_bucket_view``. When a step finds a view replaced, the views are let go (their blocks
return to the arena with the last reference) and the watch starts again.
"""

from __future__ import annotations

import weakref

import torch

from hora.common import shared_arrays


def _placeable(p: torch.Tensor) -> bool:
    grad = p.grad
    return (grad is not None and grad.device.type == "cpu" and grad.layout == torch.strided
            and grad.is_contiguous() and not grad.requires_grad and grad.dtype == p.dtype
            and grad.shape == p.shape)


class SharedGradients:
    """The views of one optimizer's gradients into blocks of the shared arena."""

    def __init__(self) -> None:
        self._views: dict[torch.Tensor, torch.Tensor] = {}
        self._seen: list[tuple[torch.Tensor, weakref.ref]] = []  # last step's gradients

    def after_step(self, reduced: list[torch.Tensor]) -> None:
        """Called once a step's reductions are done, with its parameters in submission order."""
        if self._views:
            if any(p.grad is not view for p, view in self._views.items()):
                self._views = {}
            return
        current = [(p, weakref.ref(p.grad)) for p in reduced if _placeable(p)]
        stayed = bool(current) and len(current) == len(self._seen) and all(
            p is q and p.grad is seen() for (p, _), (q, seen) in zip(current, self._seen))
        self._seen = [] if stayed else current
        if stayed:
            self._place([p for p, _ in current])

    def _place(self, params: list[torch.Tensor]) -> None:
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for p in params:
            by_dtype.setdefault(p.dtype, []).append(p)
        for dtype, group in by_dtype.items():
            # Packed: a multiple of the element size needs no padding between them.
            sizes = [p.numel() * p.element_size() for p in group]
            reserved = shared_arrays.reserve(sizes, group[0].element_size())
            if reserved is None:  # no room left: these stay private
                continue
            block, offsets = reserved
            flat = torch.frombuffer(block, dtype=torch.uint8)
            for p, at, nbytes in zip(group, offsets, sizes):
                view = flat[at:at + nbytes].view(dtype).view(p.shape)
                assert p.grad is not None
                view.copy_(p.grad)
                p.grad = view
                self._views[p] = view
