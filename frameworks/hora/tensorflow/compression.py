"""Gradient compression for TensorFlow tensors: ``Compression.none``, ``.fp16`` and ``.bf16``.

The compressors are ``hora.common.compression``'s, with TensorFlow's dtype test and cast; the
casts are ordinary TensorFlow ops, so gradients flow through them.
"""

from __future__ import annotations

import tensorflow as tf

from hora.common.compression import (
    CastCompressor,
    CompressionTable,
    Compressor,
    NoneCompressor,
    make_compression,
)

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NoneCompressor"]

# Declared for readers and the API reference; made by make_compression below.
FP16Compressor: type[CastCompressor]
"""Sends floating-point tensors as float16 (half the bytes of float32)."""
BF16Compressor: type[CastCompressor]
"""Sends floating-point tensors as bfloat16 (float32's range, float16's size)."""
Compression: type[CompressionTable]
"""The available compressors, used as ``compression=hvd.Compression.fp16``: ``none``, ``fp16``
and ``bf16``."""
FP16Compressor, BF16Compressor, Compression = make_compression(
    tf.float16, tf.bfloat16, dtype_of=lambda t: tf.as_dtype(t.dtype),
    is_floating=lambda d: d.is_floating, cast=tf.cast)
