"""``DistributedTrainer``: a ``gluon.Trainer`` whose gradients are summed over the ranks by Hora
instead of a kvstore, and the gradient compressors it accepts."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from hora.common.compression import (
    CastCompressor,
    CompressionTable,
    Compressor,
    NoneCompressor,
    make_compression,
)
from hora.common.process_sets import ProcessSet, global_process_set
from hora.mxnet.compat import import_mxnet
from hora.mxnet.optimizer import (
    allreduce_gradients_,
    check_mxnet_hook,
    hook_reduce_,
    process_set_size,
    unwrap,
)

mx = import_mxnet()

__all__ = ["Compression", "Compressor", "DistributedTrainer", "FP16Compressor", "NoneCompressor"]

# Declared for readers and the API reference; made by make_compression below.
FP16Compressor: type[CastCompressor]
"""Sends floating-point arrays as float16 (half the bytes of float32)."""
Compression: type[CompressionTable]
"""The available compressors, used as ``compression=hvd.Compression.fp16``: ``none`` and
``fp16``."""
FP16Compressor, _, Compression = make_compression(
    np.dtype(np.float16), None, dtype_of=lambda t: np.dtype(t.dtype),
    is_floating=lambda d: d in (np.float32, np.float64), cast=lambda t, d: t.astype(d))


class DistributedTrainer(mx.gluon.Trainer):
    """A ``gluon.Trainer`` that averages gradients over the ranks of a process set.

    It is created with ``kvstore=None``: ``step()`` (or ``allreduce_grads()``) sums every
    gradient whose ``grad_req`` is not ``'null'`` with Hora, and the optimizer's ``rescale_grad``
    is multiplied by ``gradient_predivide_factor / size`` so that the update uses the average.
    Gradients are named ``allreduce.<prefix><index>`` by their index in the trainer's parameter
    list, which is the same on every rank when the model is built the same way (a dict or
    ParameterDict is taken in sorted-key order); ``prefix`` keeps two trainers apart. With
    ``num_groups > 0`` the gradients are reduced in that many grouped allreduces (split further
    by dtype). A parameter on several contexts has its copies summed locally first.

    Args:
        params: a dict, ParameterDict or list of Parameters.
        optimizer: an optimizer name or instance; a DistributedOptimizer is unwrapped (with a
            warning), since the trainer does the allreduce itself.
        optimizer_params: keyword arguments for an optimizer given by name.
        compression: ``Compression.none`` (default) or ``Compression.fp16``.
        gradient_predivide_factor: gradients are multiplied by ``1 / factor`` before the sum and
            by ``factor / size`` after it.
        prefix: prepended to gradient names.
        num_groups: number of grouped allreduces per step (0: one allreduce per gradient).
        process_set: the ranks that average their gradients; a rank outside it updates with
            its own gradient.
        comm_hook: ``hook(bucket) -> future`` averaging the gradients instead of the allreduce
            (``hora.mxnet.hooks``); a bucket is one gradient, or one of ``num_groups`` groups,
            and its index the position of its first parameter.

    Raises:
        TypeError: a ``comm_hook`` that is not callable.
        ValueError: a predivide factor that is not positive, or compression or a predivide
            factor with a ``comm_hook``.
    """

    def __init__(self, params: Any, optimizer: Any, optimizer_params: dict | None = None,
                 compression: Any = None, gradient_predivide_factor: float = 1.0,
                 prefix: str | None = None, num_groups: int = 0,
                 process_set: ProcessSet = global_process_set, comm_hook: Any = None) -> None:
        inner = unwrap(optimizer)
        if inner is not None:
            warnings.warn(
                "DistributedTrainer does not take DistributedOptimizer as its optimizer; the "
                "wrapped optimizer is used instead (the trainer averages gradients itself)",
                stacklevel=2,
            )
            optimizer = inner
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be positive")
        size = process_set_size(process_set)
        if comm_hook is not None:
            check_mxnet_hook(comm_hook, compression not in (None, Compression.none),
                             gradient_predivide_factor)
            size = 1  # the hook returns averages: rescale_grad stays as it is
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._hora_compression = compression if compression is not None else Compression.none
        self._hora_predivide = float(gradient_predivide_factor)
        self._hora_prefix = prefix or ""
        self._hora_num_groups = int(num_groups)
        self._hora_process_set = process_set
        self._hora_comm_hook = comm_hook
        self._scale *= self._hora_predivide / size

    def _allreduce_grads(self) -> None:
        compression = self._hora_compression
        grads: list[Any] = []
        names: list[str] = []
        ids: list[int] = []
        pending: list[tuple[list, Any, Any]] = []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            copies = param.list_grad()
            if copies[0].stype != "default":
                raise ValueError(
                    f"DistributedTrainer supports dense gradients only; parameter {param.name} "
                    f"has a '{copies[0].stype}' gradient (create it with sparse_grad=False)"
                )
            total = copies[0]
            for other in copies[1:]:
                total += other.as_in_context(total.context)
            sent, ctx = compression.compress(total)
            grads.append(sent)
            names.append(f"{self._hora_prefix}{i}")
            ids.append(i)
            pending.append((copies, sent, ctx))
        prescale = 1.0 / self._hora_predivide
        if self._hora_comm_hook is not None:
            if self._hora_process_set.included():
                hook_reduce_(self._hora_comm_hook, grads, [f"trainer.{n}" for n in names], ids,
                             self._hora_num_groups, self._hora_process_set)
        elif self._hora_process_set.included() and (
                process_set_size(self._hora_process_set) > 1 or prescale != 1.0):
            allreduce_gradients_(grads, names, prescale_factor=prescale,
                                 num_groups=self._hora_num_groups,
                                 process_set=self._hora_process_set)
        for copies, sent, ctx in pending:
            if sent is not copies[0]:
                compression.decompress(sent, ctx).copyto(copies[0])
            for other in copies[1:]:
                copies[0].copyto(other)
