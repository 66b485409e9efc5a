"""Collective operations on JAX arrays with Horovod's signatures, eagerly and inside ``jax.jit``.

Every operation returns new ``jax.Array`` values; JAX arrays are immutable, so there is no
in-place form.

Eagerly (concrete arrays; NumPy arrays are accepted too) each call waits for the engine. Inputs
the engine only reads (allgather, alltoall, reducescatter) cross through DLPack without a copy;
allreduce and broadcast work on one host copy of their input. bfloat16 travels as its 16 bits.

Traced (inside ``jax.jit``, ``jax.lax`` loops and conditionals, ``jax.checkpoint``) each call
becomes one XLA custom call that runs in compiled code without Python (``hora.jax._ffi``), in
program order on every rank; a grouped call is one custom call for all its tensors. Shapes are
fixed at trace time: allgather then needs the same first dimension on every rank and alltoall
equal splits. An engine error surfaces from XLA as ``jax.errors.JaxRuntimeError`` whose message
starts with the Hora class (``hora.errors.MismatchError: ...``); ``hora.jax.engine_error``
turns it back into that class. ``jax.vmap`` of a collective raises ``NotSupportedError``.

``jax.grad`` works both ways: allreduce, allgather, broadcast, alltoall and reducescatter (and
their grouped forms) carry Horovod's gradients, from ``hora.common.gradients`` eagerly and from
``hora.jax._traced`` under jit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from hora.common import api, gradients, ops
from hora.common import collectives as _numpy_api
from hora.common.api import *
from hora.common.ops import Average
from hora.common.process_sets import ProcessSet, global_process_set
from hora.errors import NotSupportedError
from hora.jax import _ffi, _traced

__all__ = api.__all__ + [
    "allgather", "allreduce", "alltoall", "barrier", "broadcast", "engine_error",
    "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "join", "reducescatter",
]

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


# ------------------------------------------------------------------------------------- helpers


def _is_traced(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


def _any_traced(values: Sequence[Any]) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in values)


def refuse_traced(values: Sequence[Any], what: str) -> None:
    """Raise when any of ``values`` is being traced: for the calls that exchange Python
    objects as well as arrays, which have no form inside compiled code.

    Raises:
        NotSupportedError: a value is a ``jax.core.Tracer``.
    """
    if _any_traced(values):
        raise NotSupportedError(
            f"{what} runs eagerly only: call it outside jax.jit (it also exchanges Python "
            "objects, which compiled code cannot); allreduce, allgather, broadcast, alltoall, "
            "reducescatter and DistributedOptimizer.update work inside jax.jit"
        )


def engine_error(exc: BaseException) -> BaseException:
    """The Hora error inside a ``jax.errors.JaxRuntimeError`` raised by a jitted function's
    collective (the class and message the eager call raises), or ``exc`` unchanged::

        try:
            params = train_step(params, batch)
        except jax.errors.JaxRuntimeError as e:
            raise hvd.engine_error(e) from e
    """
    return _ffi.reraise(exc)


def _traced_call(prefix: str, name: str | None, arrays: Sequence[Any],
                 process_set: ProcessSet, grouped: bool = False) -> _traced.Call | None:
    """The names of a call on traced arrays, fixed now (None for concrete arrays)."""
    if not _any_traced(arrays):
        return None
    return _traced.Call(prefix, name, arrays, process_set, grouped)


def _check_array(value: Any, what: str) -> None:
    if not isinstance(value, (jax.Array, np.ndarray)):
        raise TypeError(f"{what} expects a jax.Array, got {type(value).__name__}")


def _host_copy(array: Any) -> np.ndarray:
    """A private, writable, C-contiguous host copy (for operations that write in place)."""
    return np.array(array, copy=True, order="C")


def _readable(array: Any) -> Any:
    """What the engine reads without writing: a JAX array itself (DLPack, no copy) or a copy of
    a NumPy array (so that the caller may change it meanwhile)."""
    if isinstance(array, jax.Array):
        return array
    return _host_copy(array)


def _to_jax(result: np.ndarray, dtype: np.dtype) -> jax.Array:
    """A JAX array of the engine's ``result``; bfloat16 arrived as its 16-bit pattern."""
    if dtype == _BFLOAT16 and result.dtype != _BFLOAT16:
        result = result.view(_BFLOAT16)
    return jnp.asarray(result)


def _names(prefix: str, name: str | None, count: int, grouped: bool,
           process_set: ProcessSet) -> list[str]:
    set_id = ops.process_set_id(process_set)
    if grouped:
        return ops.group_names(f"grouped_{prefix}", name, count, set_id)
    return [ops.op_name(prefix, name, set_id)]


def _run(collective: str, buffers: list, names: list[str], op: int | None = None,
         average: bool | None = None, prescale: float = 1.0, postscale: float = 1.0,
         root_rank: int = 0, splits: Any = None,
         process_set: ProcessSet = global_process_set) -> list:
    """Submit ``collective`` on ``buffers`` and wait; returns the finished engine handles."""
    if not buffers:
        return []
    handles = ops.enqueue(collective, buffers, names=names, op=op, average=average,
                          prescale=prescale, postscale=postscale, root_rank=root_rank,
                          splits=splits, process_set=process_set, hora_frames=3)
    ops.wait_all(handles)
    return handles


def _outputs(handles: list, arrays: Sequence[Any]) -> list[jax.Array]:
    return [_to_jax(ops.allocated_output(h), np.dtype(a.dtype)) for h, a in zip(handles, arrays)]


Forward = Callable[[list], tuple[list, Any]]
Backward = Callable[[Any, list], list]


def _dispatch(arrays: list, what: str, forward: Forward, backward: Backward) -> list:
    """Run ``forward`` on concrete ``arrays``; on traced ones, through a ``jax.custom_vjp``.

    ``forward(arrays) -> (outputs, residuals)`` and ``backward(residuals, cotangents) ->
    input cotangents`` see concrete values under eager ``jax.grad`` and traced ones under jit;
    each takes the eager or the traced path by what it is given.
    """
    for array in arrays:
        if not _is_traced(array):
            _check_array(array, what)
    if not _any_traced(arrays):
        return forward(arrays)[0]

    @jax.custom_vjp
    def collective(*xs: Any) -> tuple:
        return tuple(forward(list(xs))[0])

    def collective_fwd(*xs: Any) -> tuple:
        outputs, residuals = forward(list(xs))
        return tuple(outputs), residuals

    def collective_bwd(residuals: Any, cotangents: tuple) -> tuple:
        return tuple(backward(residuals, list(cotangents)))

    collective.defvjp(collective_fwd, collective_bwd)
    return list(collective(*arrays))


# ----------------------------------------------------------------------------------- allreduce


def _allreduce_list(arrays: list, name: str | None, grouped: bool, what: str, op: int | None,
                    average: bool | None, prescale: float, postscale: float,
                    process_set: ProcessSet) -> list[jax.Array]:
    resolved = ops.handle_average_backwards_compatibility(op, average)
    call = _traced_call("allreduce", name, arrays, process_set, grouped)

    def forward(xs: list) -> tuple[list, Any]:
        if call is not None and _any_traced(xs):
            return _traced.allreduce(call, xs, resolved, prescale, postscale), None
        hosts = [_host_copy(x) for x in xs]
        _run("allreduce", hosts, _names("allreduce", name, len(xs), grouped, process_set),
             op=resolved, prescale=prescale, postscale=postscale, process_set=process_set)
        return [_to_jax(h, h.dtype) for h in hosts], None

    def backward(_: Any, cts: list) -> list:
        gradients.check_differentiable(resolved, what)
        if call is not None and _any_traced(cts):
            return _traced.allreduce_grad(call, cts, resolved, prescale, postscale)
        hosts = [_host_copy(c) for c in cts]
        out = gradients.allreduce_grad(hosts, resolved, prescale, postscale, process_set)()
        return [_to_jax(g, g.dtype) for g in out]

    return _dispatch(arrays, what, forward, backward)


def allreduce(tensor: Any, average: bool | None = None, name: str | None = None,
              op: int | None = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> jax.Array:
    """Return the reduction of ``tensor`` over the process set as a new array.

    Args:
        tensor: a ``jax.Array`` (concrete, or traced inside ``jax.jit``) of uint8, int8, uint16, int16, int32, int64, float16,
            bfloat16, float32, float64 or bool.
        average: deprecated; use ``op`` (``average=True`` is Average, ``False`` is Sum).
        name: tensor name, equal on every rank (default: an automatic name, which needs every
            rank to issue unnamed operations in the same order).
        op: Average (default), Sum, Min, Max, Product or Adasum.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks taking part.

    Raises:
        NotSupportedError: called under ``jax.vmap``.
        TypeError: ``tensor`` is not an array.
        ValueError: bad arguments or an unsupported dtype.
        HoraError: the ranks disagree (MismatchError) or the job failed.
    """
    return _allreduce_list([tensor], name, False, "allreduce", op, average, prescale_factor,
                           postscale_factor, process_set)[0]


def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None,
                      name: str | None = None, op: int | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[jax.Array]:
    """Return the reductions of every tensor, negotiated and fused as one group.

    Tensor names are ``grouped_allreduce.<name>_<i>of<n>``; other arguments and errors as in
    :func:`allreduce`.
    """
    return _allreduce_list(list(tensors), name, True, "grouped_allreduce", op, average,
                           prescale_factor, postscale_factor, process_set)


# ----------------------------------------------------------------------------------- allgather


def _allgather_list(arrays: list, name: str | None, grouped: bool, what: str,
                    process_set: ProcessSet) -> list[jax.Array]:
    dims = [int(a.shape[0]) if a.ndim > 0 else 1 for a in arrays]
    call = _traced_call("allgather", name, arrays, process_set, grouped)

    def forward(xs: list) -> tuple[list, Any]:
        if call is not None and _any_traced(xs):
            return _traced.allgather(call, xs), None
        names = _names("allgather", name, len(xs), grouped, process_set)
        handles = _run("allgather", [_readable(x) for x in xs], names, process_set=process_set)
        return _outputs(handles, xs), None

    def backward(_: Any, cts: list) -> list:
        if call is not None and _any_traced(cts):
            return _traced.allgather_grad(call, cts, dims)
        hosts = [_host_copy(c) for c in cts]
        out = gradients.allgather_grad(hosts, dims, process_set)()
        return [_to_jax(np.ascontiguousarray(g), g.dtype) for g in out]

    return _dispatch(arrays, what, forward, backward)


def allgather(tensor: Any, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> jax.Array:
    """Concatenate ``tensor`` from every rank of the set along dimension 0.

    The first dimension may differ between ranks; the others must match.

    Raises:
        NotSupportedError: called under ``jax.vmap``.
        ValueError: a scalar tensor or an unsupported dtype.
        HoraError: the ranks disagree on dtype or trailing shape.
    """
    return _allgather_list([tensor], name, False, "allgather", process_set)[0]


def grouped_allgather(tensors: Sequence[Any], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[jax.Array]:
    """Allgather every tensor as one group; returns the gathered arrays in order.

    Raises:
        NotSupportedError: called under ``jax.vmap``.
        HoraError: the ranks disagree on a tensor's dtype or trailing shape.
    """
    return _allgather_list(list(tensors), name, True, "grouped_allgather", process_set)


# ----------------------------------------------------------------------------------- broadcast


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> jax.Array:
    """Return the value of ``tensor`` on ``root_rank`` (a global rank) as a new array.

    Raises:
        NotSupportedError: called under ``jax.vmap``.
        ValueError: ``root_rank`` is not in the process set.
        HoraError: the ranks disagree on root, dtype or shape.
    """
    call = _traced_call("broadcast", name, [tensor], process_set)

    def names() -> list[str]:
        return _names("broadcast", name, 1, False, process_set)

    return _broadcast_list([tensor], names, call, root_rank, "broadcast", process_set)[0]


def grouped_broadcast_as(tensors: list, names: list[str], root_rank: int, what: str,
                         process_set: ProcessSet) -> list[jax.Array]:
    """Broadcast concrete ``tensors`` from ``root_rank`` as one group under the given engine
    ``names`` (``broadcast_parameters``' path).

    Raises:
        ValueError: ``root_rank`` is not in the process set.
        HoraError: the ranks disagree on root, dtype or shape.
    """
    return _broadcast_list(list(tensors), lambda: names, None, root_rank, what, process_set)


def _broadcast_list(arrays: list, names: Callable[[], list[str]], call: _traced.Call | None,
                    root_rank: int, what: str, process_set: ProcessSet) -> list[jax.Array]:

    def forward(xs: list) -> tuple[list, Any]:
        if call is not None and _any_traced(xs):
            return _traced.broadcast(call, xs, root_rank), None
        hosts = [_host_copy(x) for x in xs]
        _run("broadcast", hosts, names(), root_rank=root_rank, process_set=process_set)
        return [_to_jax(h, h.dtype) for h in hosts], None

    def backward(_: Any, cts: list) -> list:
        if call is not None and _any_traced(cts):
            return _traced.broadcast_grad(call, cts, root_rank)
        out = gradients.broadcast_grad([_host_copy(c) for c in cts], root_rank, process_set)()
        return [_to_jax(g, g.dtype) for g in out]

    return _dispatch(arrays, what, forward, backward)


# ------------------------------------------------------------------------------------ alltoall


def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> Any:
    """Send ``splits[i]`` rows of ``tensor`` (in order) to set rank i and gather what the
    others sent to this rank.

    Args:
        tensor: rows to scatter along dimension 0.
        splits: one row count per set rank (sum at most dim 0); a list, NumPy or JAX array.
            Without it dimension 0 is split equally (it must be divisible by the set size).

    Returns:
        The received rows, or ``(received rows, received_splits)`` (an int32 array) when
        ``splits`` was given.

    Raises:
        NotSupportedError: called under ``jax.vmap``, or inside ``jax.jit`` with ``splits``.
        InvalidCollectiveError: splits that do not fit the set or the tensor.
    """
    call = _traced_call("alltoall", name, [tensor], process_set)
    host_splits = None if splits is None else np.asarray(splits)
    dim0 = int(tensor.shape[0]) if getattr(tensor, "ndim", 0) > 0 else 0

    def forward(xs: list) -> tuple[list, Any]:
        if call is not None and _any_traced(xs):
            _traced.refuse_splits(splits)
            out = _traced.alltoall(call, xs[0])
            return [*out, jnp.zeros((0,), jnp.int32)], None
        handles = _run("alltoall", [_readable(xs[0])],
                       _names("alltoall", name, 1, False, process_set), splits=host_splits,
                       process_set=process_set)
        received = np.asarray(handles[0].received_splits(), dtype=np.int32)
        return [*_outputs(handles, xs), jnp.asarray(received)], received

    def backward(received: Any, cts: list) -> list:
        if call is not None and _any_traced(cts):
            return _traced.alltoall(call, cts[0], grad=True)
        back = gradients.alltoall_grad(_host_copy(cts[0]), [int(r) for r in received], dim0,
                                       process_set)()
        return [_to_jax(np.ascontiguousarray(back), np.dtype(cts[0].dtype))]

    out, received = _dispatch([tensor], "alltoall", forward, backward)
    return out if splits is None else (out, received)


# ------------------------------------------------------------------------------- reducescatter


def _reducescatter_list(arrays: list, name: str | None, grouped: bool, what: str, op: int,
                        prescale: float, postscale: float,
                        process_set: ProcessSet) -> list[jax.Array]:
    call = _traced_call("reducescatter", name, arrays, process_set, grouped)
    dims = [int(a.shape[0]) if a.ndim > 0 else 0 for a in arrays]

    def forward(xs: list) -> tuple[list, Any]:
        if call is not None and _any_traced(xs):
            return _traced.reducescatter(call, xs, op, prescale, postscale), None
        names = _names("reducescatter", name, len(xs), grouped, process_set)
        handles = _run("reducescatter", [_readable(x) for x in xs], names, op=op,
                       prescale=prescale, postscale=postscale, process_set=process_set)
        return _outputs(handles, xs), None

    def backward(_: Any, cts: list) -> list:
        gradients.check_differentiable(op, what)
        if call is not None and _any_traced(cts):
            return _traced.reducescatter_grad(call, cts, dims, op, prescale, postscale)
        out = gradients.reducescatter_grad([_host_copy(c) for c in cts], op, prescale,
                                           postscale, process_set)()
        return [_to_jax(np.ascontiguousarray(g), np.dtype(c.dtype)) for g, c in zip(out, cts)]

    return _dispatch(arrays, what, forward, backward)


def reducescatter(tensor: Any, op: int = Average, name: str | None = None,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> jax.Array:
    """Reduce ``tensor`` over the set (Sum or Average) and return this rank's rows of the
    result; the first ``dim0 % size`` ranks of the set get one row more than the others.

    Raises:
        NotSupportedError: called under ``jax.vmap``.
        InvalidCollectiveError: an op other than Sum or Average.
        ValueError: a scalar tensor.
    """
    return _reducescatter_list([tensor], name, False, "reducescatter", op, prescale_factor,
                               postscale_factor, process_set)[0]


def grouped_reducescatter(tensors: Sequence[Any], op: int = Average, name: str | None = None,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[jax.Array]:
    """Reducescatter every tensor as one group; returns this rank's shares in order.

    Raises:
        NotSupportedError: called under ``jax.vmap``.
        InvalidCollectiveError: an op other than Sum or Average.
    """
    return _reducescatter_list(list(tensors), name, True, "grouped_reducescatter", op,
                               prescale_factor, postscale_factor, process_set)


# ----------------------------------------------------------------------------- other functions


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of the set has reached the barrier."""
    _numpy_api.barrier(process_set)


def join() -> int:
    """Declare that this rank has no more batches; until every rank has joined, it contributes
    zeros to the allreduces of the others. Returns the last rank to join (equal on all ranks)."""
    return _numpy_api.join()
