"""Gradient compression applied around allreduce: ``Compression.none``, ``.fp16`` and ``.bf16``.

A compressor turns a tensor into the form sent over the wire and back. ``compress`` returns the
tensor to communicate and a context object that ``decompress`` needs to restore the original
form. The casts are ordinary TensorFlow ops, so gradients flow through them.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NoneCompressor"]


class Compressor:
    """Interface of a gradient compressor (all methods are static)."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        """Return the tensor to communicate and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Restore a communicated tensor to its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        """Return ``tensor`` itself."""
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Return ``tensor`` itself."""
        return tensor


class _CastCompressor(Compressor):
    """Casts floating-point tensors to ``wire_dtype`` for the trip and back afterwards."""

    wire_dtype: tf.DType = tf.float16

    @classmethod
    def compress(cls, tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        """Cast a floating-point tensor to the wire dtype; other tensors pass unchanged."""
        original = tf.as_dtype(tensor.dtype)
        if original.is_floating and original != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), original
        return tensor, original

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Cast back to the dtype recorded by ``compress``."""
        if ctx is not None and tensor.dtype != ctx:
            return tf.cast(tensor, ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16 (half the bytes of float32)."""

    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16 (float32's range with float16's size)."""

    wire_dtype = tf.bfloat16


class Compression:
    """The available compressors, used as ``compression=hvd.Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
