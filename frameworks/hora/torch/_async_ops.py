"""Asynchronous collective operations on torch tensors (integer handles, as in Horovod).

Every ``*_async`` function enqueues work on the engine and returns an ``int`` handle, as Horovod's
torch API does. ``synchronize(handle)`` waits for it and returns the result; ``poll(handle)`` asks
whether it finished. Tensors cross to the engine through DLPack (``tensor.detach()``, which shares
memory): allreduce and broadcast results land in the memory of the tensor handed over, while the
engine allocates the outputs of allgather, alltoall and reducescatter and hands them back as NumPy
arrays that are wrapped without a copy. Everything else (op table, names, checks, waiting and
errors) is the shared pipeline of ``hora.common.ops``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Union

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack as _to_dlpack

from hora.common import ops as _ops
from hora.common.ops import (
    Adasum,
    AsyncResult,
    Average,
    Max,
    Min,
    Product,
    Sum,
    handle_average_backwards_compatibility,
)
from hora.common.process_sets import ProcessSet, global_process_set

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "handle_average_backwards_compatibility",
]

SplitsLike = Union[torch.Tensor, Sequence[int], np.ndarray, None]

poll = _ops.poll_handle
synchronize = _ops.synchronize_handle

# Module constants: each call's checks read these instead of looking them up on ``torch``.
_Tensor = torch.Tensor
_STRIDED = torch.strided
# A result capsule made into a tensor: torch.from_dlpack ends in torch._C._from_dlpack after
# checks for producer objects (about 0.4 us a call), which a capsule does not need.
_from_capsule = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)

_SUPPORTED_DTYPES = frozenset(
    d
    for d in (
        torch.uint8, torch.int8, getattr(torch, "uint16", None), torch.int16, torch.int32,
        torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
    )
    if d is not None
)



def _engine_form(tensor: torch.Tensor) -> Any:
    """What the engine imports for a prepared tensor: a CPU tensor's DLPack capsule, made
    without ``__dlpack__``'s Python-level checks (those that matter here, gradient and layout,
    were made by the preparation); any other tensor itself (its ``__dlpack__`` also orders the
    engine's stream after a CUDA producer, and raises what the engine cannot take)."""
    if tensor.is_cpu and not tensor.requires_grad and tensor.layout == _STRIDED:
        return _to_dlpack(tensor)
    return tensor


def _check_tensor(tensor: Any, what: str) -> None:
    if not isinstance(tensor, _Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != _STRIDED:
        raise ValueError(
            f"{what} expects a dense tensor, got layout {tensor.layout}; "
            "use sparse_allreduce_async for sparse tensors"
        )
    if tensor.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"Tensor type {tensor.dtype} is not supported.")


def inplace_view(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """The tensor's own memory, as the engine will write into it."""
    _check_tensor(tensor, what)
    # A plain tensor outside autograd already is what detach() would make (the same memory); a
    # subclass (a frozen Parameter, say) still becomes a plain tensor, which crosses as a capsule.
    plain = type(tensor) is _Tensor and not tensor.requires_grad
    view = tensor if plain else tensor.detach()
    if not view.is_contiguous():
        raise ValueError(
            f"{what}: tensor is not contiguous (shape {list(tensor.shape)}, strides "
            f"{list(tensor.stride())}); in-place operations need contiguous memory"
        )
    return view


def contiguous_input(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """The tensor's values in contiguous memory (itself when it already is)."""
    _check_tensor(tensor, what)
    view = tensor.detach()
    return view if view.is_contiguous() else view.contiguous()


def fresh_copy(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """A private contiguous copy of the tensor, for the engine to write into."""
    _check_tensor(tensor, what)
    if not tensor.requires_grad and tensor.is_contiguous():
        # Outside autograd and already contiguous (the common call): a plain clone keeps that
        # layout and is a third cheaper than detaching first and naming the format.
        return tensor.clone()
    return tensor.detach().clone(memory_format=torch.contiguous_format)


# The preparations _prepared may skip for a plain tensor.
_DEFAULT_PREPARES = (inplace_view, contiguous_input, fresh_copy)


def _is_plain(tensor: Any) -> bool:
    """The common tensor: plain, dense, contiguous, on the CPU, outside autograd, of a dtype the
    engine takes. It needs none of the preparations' checks (they would pass it as it is)."""
    return (type(tensor) is _Tensor and tensor.layout == _STRIDED and not tensor.requires_grad
            and tensor.is_cpu and tensor.dtype in _SUPPORTED_DTYPES and tensor.is_contiguous())


def _prepared(tensor: Any, prepare: Callable[[torch.Tensor, str], torch.Tensor], what: str,
              plain: bool) -> tuple[torch.Tensor, Any]:
    """(the buffer the engine works on, what it imports): ``prepare``'s buffer in its engine
    form. ``plain``: the tensor is plain (``_is_plain``) and ``prepare`` one of
    ``_DEFAULT_PREPARES``; then the same without the checks (the tensor itself, or fresh_copy's
    clone of it)."""
    if plain:
        buf = tensor.clone() if prepare is fresh_copy else tensor
        return buf, _to_dlpack(buf)
    buf = prepare(tensor, what)
    return buf, _engine_form(buf)


def from_engine(array: Any, dtype: torch.dtype,
                shape: Sequence[int]) -> torch.Tensor:
    """Wrap an engine-owned result array as a tensor of ``dtype`` without copying."""
    if array is None:
        return torch.empty((0, *shape[1:]), dtype=dtype)
    if not isinstance(array, np.ndarray):  # a GPU result (DLPack), on the input's device
        return torch.from_dlpack(array)
    if array.dtype == np.uint16 and dtype != getattr(torch, "uint16", None):
        array = array.view(np.int16)
    if not array.flags.writeable:
        array = array.copy()
    result = torch.from_numpy(array)
    if result.dtype != dtype:
        result = result.view(dtype)
    return result


def call(collective: str, tensors: Sequence[torch.Tensor], grouped: bool, what: str,
         prepare: Callable[[torch.Tensor, str], torch.Tensor] | None = None,
         in_place: bool = False, *, name: str | None = None, names: Sequence[str] | None = None,
         op: int | None = None, average: bool | None = None, prescale: float = 1.0,
         postscale: float = 1.0, root_rank: int = 0, splits: Any = None,
         process_set: ProcessSet = global_process_set, waits: bool = False) -> AsyncResult:
    """The torch frontend's one submission: ``collective`` on ``tensors`` (``what`` names the
    call in errors), turned into the engine's request and its result turned back.

    ``in_place`` operations write into the tensors themselves (``wait`` returns them), the
    others into fresh copies; operations the engine allocates return new tensors. ``prepare``
    replaces the default preparation of each tensor. The keyword arguments are those of
    ``hora.common.ops.enqueue`` (``waits``: the caller waits for the result at once).
    """
    spec = _ops.OPS[collective]
    if prepare is None:
        prepare = (inplace_view if in_place else fresh_copy) if spec.in_place else contiguous_input
    default = prepare in _DEFAULT_PREPARES
    if len(tensors) == 1:
        t = tensors[0]
        buf, form = _prepared(t, prepare, what, default and _is_plain(t))
        bufs, engine = [buf], [form]
    else:
        tensors = list(tensors)
        prepared = [_prepared(t, prepare, what, default and _is_plain(t)) for t in tensors]
        bufs = [buf for buf, _ in prepared]
        engine = [form for _, form in prepared]
    # Frames certainly Hora's above the pipeline: this one.
    handles = _ops.enqueue(collective, engine, name=name, names=names, grouped=grouped, op=op,
                           average=average, prescale=prescale, postscale=postscale,
                           root_rank=root_rank, splits=splits, process_set=process_set,
                           hora_frames=1, waits=waits)
    if spec.in_place:
        # The result is known now: no closure to build per call.
        results = tensors if in_place else bufs
        return AsyncResult(handles, None, list(results) if grouped else results[0], waits)

    def finish(hs: list) -> Any:
        outs = [from_engine(_ops.handle_output(h), t.dtype, list(t.shape))
                for h, t in zip(hs, tensors)]
        if collective == "alltoall":
            received = torch.tensor(list(hs[0].received_splits()), dtype=torch.int32)
            return outs[0], received
        return outs if grouped else outs[0]

    return AsyncResult(handles, finish, None, waits)


def run_one(collective: str, tensor: torch.Tensor, what: str, in_place: bool, name: str | None,
            op: int | None, average: bool | None, prescale: float, postscale: float,
            root_rank: int, process_set: ProcessSet) -> torch.Tensor:
    """``call(collective, [tensor], False, what, None, in_place, waits=True, ...).wait()`` for
    the operations that write into their buffer (allreduce, broadcast), in fewer steps: the
    engine waits inside the submission and the result is the buffer (or, for a plain tensor out
    of place, the engine's copy), so no AsyncResult is made.
    The arguments are ``call``'s, positional: a training loop's small operations pay for every
    keyword passed on."""
    # A plain tensor needs no more checks; any other goes through inplace_view or fresh_copy,
    # which say what is wrong with it or detach it, and _engine_form. A plain tensor out of
    # place is not cloned: the engine works on its own copy, which comes back through DLPack.
    plain = _is_plain(tensor)
    on_copy = plain and not in_place
    prepare = inplace_view if in_place or plain else fresh_copy
    buf, engine = _prepared(tensor, prepare, what, plain)
    # Frames certainly Hora's above the pipeline: this one and the public function that called
    # it (hora.torch.allreduce, allreduce_, broadcast_).
    results = _ops.enqueue(collective, [engine], name=name, op=op, average=average,
                           prescale=prescale, postscale=postscale, root_rank=root_rank,
                           process_set=process_set, hora_frames=2, waits=True, copy=on_copy)
    if on_copy:
        return _from_capsule(results[0])
    return tensor if in_place else buf


def start(collective: str, tensors: Sequence[torch.Tensor], grouped: bool, what: str,
          in_place: bool = False, name: str | None = None, op: int | None = None,
          average: bool | None = None, prescale: float = 1.0, postscale: float = 1.0,
          root_rank: int = 0, splits: Any = None,
          process_set: ProcessSet = global_process_set) -> int:
    """``call``, as Horovod's torch API returns it from ``*_async``: an integer handle."""
    return _ops.register_handle(call(
        collective, tensors, grouped, what, None, in_place, name=name, op=op, average=average,
        prescale=prescale, postscale=postscale, root_rank=root_rank, splits=splits,
        process_set=process_set))


def start_one(collective: str, tensor: torch.Tensor, what: str, in_place: bool,
              name: str | None, op: int | None, average: bool | None, prescale: float,
              postscale: float, root_rank: int, process_set: ProcessSet) -> int:
    """``start(collective, [tensor], False, what, in_place, ...)`` for the operations that
    write into their buffer (allreduce, broadcast), in fewer steps, as ``run_one`` is for the
    blocking call: a backward pass submits one such call per gradient. Positional arguments."""
    plain = _is_plain(tensor)
    buf, engine = _prepared(tensor, inplace_view if in_place else fresh_copy, what, plain)
    # Frames certainly Hora's above the pipeline: this one and the public function.
    handles = _ops.enqueue(collective, [engine], name=name, op=op, average=average,
                           prescale=prescale, postscale=postscale, root_rank=root_rank,
                           process_set=process_set, hora_frames=2)
    return _ops.register_handle(AsyncResult(handles, None, tensor if in_place else buf))


# ----------------------------------------------------------------------------------- allreduce


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: int | None = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start an allreduce into a new tensor; ``synchronize`` returns that tensor.

    ``op`` is one of Average (default), Sum, Adasum, Min, Max, Product. ``prescale_factor``
    multiplies each input before the reduction, ``postscale_factor`` the result after it.
    """
    return start_one("allreduce", tensor, "allreduce_async", False, name, op, average,
                     prescale_factor, postscale_factor, 0, process_set)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: int | None = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """Start an in-place allreduce of ``tensor``; ``synchronize`` returns ``tensor``.

    Raises:
        ValueError: the tensor is not contiguous or its dtype is not supported.
    """
    return start_one("allreduce", tensor, "allreduce_async_", True, name, op, average,
                     prescale_factor, postscale_factor, 0, process_set)


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: bool | None = None,
                            name: str | None = None, op: int | None = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start one allreduce of several tensors, enqueued together so they fuse.

    ``synchronize`` returns a list of new tensors.
    """
    return start("allreduce", tensors, True, "grouped_allreduce_async", name=name, op=op,
                 average=average, prescale=prescale_factor, postscale=postscale_factor,
                 process_set=process_set)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None,
                             name: str | None = None, op: int | None = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """In-place form of ``grouped_allreduce_async``; ``synchronize`` returns the input tensors."""
    return start("allreduce", tensors, True, "grouped_allreduce_async_", in_place=True,
                 name=name, op=op, average=average, prescale=prescale_factor,
                 postscale=postscale_factor, process_set=process_set)


# ---------------------------------------------------------------------------- allgather


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start an allgather: the result concatenates every rank's tensor along dimension 0.

    The first dimension may differ between ranks; the others must match.
    """
    return start("allgather", [tensor], False, "allgather_async", name=name,
                 process_set=process_set)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start allgathers of several tensors together; ``synchronize`` returns a list."""
    return start("allgather", tensors, True, "grouped_allgather_async", name=name,
                 process_set=process_set)


# ---------------------------------------------------------------------------- broadcast


def root_rank_of(root_rank: Any) -> int:
    """``root_rank`` as an int (Horovod's torch refuses anything else, bool included)."""
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)):
        raise TypeError(f"root_rank must be an int, got {type(root_rank).__name__}")
    return int(root_rank)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start a broadcast of ``root_rank``'s tensor (a global rank) into a new tensor."""
    return start_one("broadcast", tensor, "broadcast_async", False, name, None, None, 1.0, 1.0,
                     root_rank_of(root_rank), process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Start an in-place broadcast: ``tensor`` receives ``root_rank``'s values."""
    return start_one("broadcast", tensor, "broadcast_async_", True, name, None, None, 1.0, 1.0,
                     root_rank_of(root_rank), process_set)


# ----------------------------------------------------------------------------- alltoall


def normalize_splits(splits: SplitsLike) -> list[int] | None:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError(f"splits must be an int32 tensor, got {splits.dtype}")
        if splits.dim() != 1:
            raise ValueError(f"splits must be a 1-D tensor, got {splits.dim()} dimensions")
        return [int(x) for x in splits.tolist()]
    array = np.asarray(splits)
    if array.ndim != 1:
        raise ValueError(f"splits must be one-dimensional, got shape {list(array.shape)}")
    if array.size and (array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"splits must hold integers, got {array.dtype}")
    return [int(x) for x in array.tolist()]


def alltoall_async(tensor: torch.Tensor, splits: SplitsLike = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Start an alltoall: rank i sends ``splits[j]`` rows of ``tensor`` to rank j.

    Without ``splits`` dimension 0 is split equally (it must divide by the set size).
    ``synchronize`` returns ``(output, received_splits)``, received_splits an int32 tensor.
    """
    return start("alltoall", [tensor], False, "alltoall_async", name=name,
                 splits=normalize_splits(splits), process_set=process_set)


# ------------------------------------------------------------------------ reducescatter


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: int = Average,
                        process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Start a reducescatter: reduce over ranks, then rank i keeps the i-th block of rows.

    The first ``dim0 % size`` ranks get one row more than the others. ``op``: Average or Sum.
    """
    return start("reducescatter", [tensor], False, "reducescatter_async", name=name, op=op,
                 prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                                op: int = Average, process_set: ProcessSet = global_process_set,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Start reducescatters of several tensors together; ``synchronize`` returns a list."""
    return start("reducescatter", tensors, True, "grouped_reducescatter_async", name=name, op=op,
                 prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)


# ------------------------------------------------------------------------------- sparse


class SparseHandle(int):
    """The handle of ``sparse_allreduce_async``: calling it, as in Horovod, waits and returns
    the reduced sparse tensor; as an ``int`` it also works with ``poll`` and ``synchronize``."""

    __slots__ = ()

    def __call__(self) -> torch.Tensor:
        return synchronize(self)


def sparse_allreduce_async(tensor: torch.Tensor, name: str | None = None, op: int = Average,
                           process_set: ProcessSet = global_process_set) -> SparseHandle:
    """Start the reduction of a sparse COO tensor by allgathering its indices and values.

    ``handle()`` (or ``synchronize(handle)``) returns a sparse tensor holding every rank's
    entries (uncoalesced; duplicates add up when coalesced). With Average the values are divided
    by the set size.
    """
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async supports only Average and Sum")
    if tensor.layout != torch.sparse_coo:
        raise ValueError(f"sparse_allreduce_async expects a sparse COO tensor, got {tensor.layout}")
    sparse = tensor.detach()
    parts = [sparse._indices().t().contiguous(), sparse._values().contiguous()]
    base = name if name else _ops.auto_name("sparse_allreduce", int(process_set.process_set_id or 0))
    gather = call("allgather", parts, True, "sparse_allreduce_async", process_set=process_set,
                  names=[f"allgather.{base}.indices", f"allgather.{base}.values"])
    size = process_set.size()

    def finish(_: list) -> torch.Tensor:
        all_indices, all_values = gather.wait()
        if op == Average:
            all_values = all_values / size
        return torch.sparse_coo_tensor(all_indices.t(), all_values, sparse.size(),
                                       check_invariants=False)

    return SparseHandle(_ops.register_handle(AsyncResult(gather.handles, finish)))
