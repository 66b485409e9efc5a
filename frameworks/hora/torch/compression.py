"""Gradient compression applied around allreduce: ``Compression.none``, ``.fp16`` and ``.bf16``.

A compressor turns a tensor into the form sent over the wire and back. ``compress`` returns the
tensor to communicate and a context object that ``decompress`` needs to restore the original form.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NoneCompressor"]


class Compressor:
    """Interface of a gradient compressor (all methods are static)."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Return the tensor to communicate and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Restore a communicated tensor to its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Return ``tensor`` itself."""
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Return ``tensor`` itself."""
        return tensor


class _CastCompressor(Compressor):
    """Casts floating-point tensors to ``wire_dtype`` for the trip and back afterwards."""

    wire_dtype: torch.dtype = torch.float16

    @classmethod
    def compress(cls, tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Cast a floating-point tensor to the wire dtype; other tensors pass unchanged."""
        original = tensor.dtype
        if original.is_floating_point and original != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), original
        return tensor, original

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Cast back to the dtype recorded by ``compress``."""
        if ctx is not None and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16 (half the bytes of float32)."""

    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16 (float32's range with float16's size)."""

    wire_dtype = torch.bfloat16


class Compression:
    """The available compressors, used as ``compression=hvd.Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
