"""Gradient compression for torch tensors: ``Compression.none``, ``.fp16`` and ``.bf16``.

The compressors are ``hora.common.compression``'s, with torch's dtype test and cast.
"""

from __future__ import annotations

import torch

from hora.common.compression import Compressor, NoneCompressor, make_compression

__all__ = ["BF16Compressor", "Compression", "Compressor", "FP16Compressor", "NoneCompressor"]

FP16Compressor, BF16Compressor, Compression = make_compression(
    torch.float16, torch.bfloat16, dtype_of=lambda t: t.dtype,
    is_floating=lambda d: d.is_floating_point, cast=lambda t, d: t.to(d))
