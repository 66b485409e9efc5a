"""Gradient compression around a collective: ``Compression.none``, ``.fp16`` and ``.bf16``.

A compressor turns a tensor into the form sent over the wire and back: ``compress`` returns the
tensor to communicate and a context that ``decompress`` needs to restore the original form.
The classes here hold the logic once; a frontend supplies the dtype questions and the cast
(``make_compression``), so its compressors work on its own tensors.
"""

from __future__ import annotations

from typing import Any, Callable


class Compressor:
    """Interface of a gradient compressor (all methods are static or class methods)."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        """Return the tensor to communicate and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        """Restore a communicated tensor to its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        """Return ``tensor`` itself."""
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        """Return ``tensor`` itself."""
        return tensor


class CastCompressor(Compressor):
    """Casts floating-point tensors to ``wire_dtype`` for the trip and back afterwards.

    The frontend hooks: ``dtype_of(tensor)``, ``is_floating(dtype)`` and ``cast(tensor, dtype)``.
    """

    wire_dtype: Any = None
    dtype_of: Callable[[Any], Any] = staticmethod(lambda tensor: tensor.dtype)
    is_floating: Callable[[Any], bool] = staticmethod(lambda dtype: False)
    cast: Callable[[Any, Any], Any] = staticmethod(lambda tensor, dtype: tensor)

    @classmethod
    def compress(cls, tensor: Any) -> tuple[Any, Any]:
        """Cast a floating-point tensor to the wire dtype; other tensors pass unchanged."""
        original = cls.dtype_of(tensor)
        if cls.is_floating(original) and original != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), original
        return tensor, original

    @classmethod
    def decompress(cls, tensor: Any, ctx: Any) -> Any:
        """Cast back to the dtype recorded by ``compress``."""
        if ctx is not None and cls.dtype_of(tensor) != ctx:
            return cls.cast(tensor, ctx)
        return tensor


class CompressionTable:
    """The compressors of one frontend, used as ``compression=hvd.Compression.fp16``."""

    none: type[Compressor] = NoneCompressor
    fp16: type[Compressor]
    bf16: type[Compressor]


def make_compression(float16: Any, bfloat16: Any, dtype_of: Callable[[Any], Any],
                     is_floating: Callable[[Any], bool], cast: Callable[[Any, Any], Any]
                     ) -> tuple[type[CastCompressor], type[CastCompressor], type[CompressionTable]]:
    """A frontend's ``(FP16Compressor, BF16Compressor, Compression)`` from its cast hooks;
    without a ``bfloat16`` dtype, ``Compression`` has no ``bf16``."""
    hooks = {"dtype_of": staticmethod(dtype_of), "is_floating": staticmethod(is_floating),
             "cast": staticmethod(cast)}
    fp16 = type("FP16Compressor", (CastCompressor,), {
        **hooks, "wire_dtype": float16,
        "__doc__": "Sends floating-point tensors as float16 (half the bytes of float32)."})
    bf16 = type("BF16Compressor", (CastCompressor,), {
        **hooks, "wire_dtype": bfloat16,
        "__doc__": "Sends floating-point tensors as bfloat16 (float32's range, float16's size)."})
    members = {"none": NoneCompressor, "fp16": fp16}
    if bfloat16 is not None:
        members["bf16"] = bf16
    compression = type("Compression", (CompressionTable,), {
        **members,
        "__doc__": "The available compressors, used as ``compression=hvd.Compression.fp16``."})
    return fp16, bf16, compression
