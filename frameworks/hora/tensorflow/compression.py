"""Gradient compression for TensorFlow tensors: ``Compression.none``, ``.fp16`` and ``.bf16``.

The compressors are ``hora.common.compression``'s, with TensorFlow's dtype test and cast; the
casts are ordinary TensorFlow ops, so gradients flow through them.
"""

from __future__ import annotations

import tensorflow as tf

from hora.common.compression import Compressor, NoneCompressor, make_compression

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NoneCompressor"]

FP16Compressor, BF16Compressor, Compression = make_compression(
    tf.float16, tf.bfloat16, dtype_of=lambda t: tf.as_dtype(t.dtype),
    is_floating=lambda d: d.is_floating, cast=tf.cast)
