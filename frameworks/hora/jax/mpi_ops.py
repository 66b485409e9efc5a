"""Collective operations on JAX arrays with Horovod's signatures, run eagerly.

Every operation takes concrete ``jax.Array`` values (NumPy arrays are accepted too), waits for the
engine and returns new ``jax.Array`` values; JAX arrays are immutable, so there is no in-place
form. Inputs the engine only reads (allgather, alltoall, reducescatter) cross through DLPack
without a copy; allreduce and broadcast work on one host copy of their input. Results come back
with ``jnp.asarray``. bfloat16 travels as its 16 bits and is restored on the way back.

Tracing: a value under ``jax.jit``, ``jax.vmap`` or ``jax.lax`` control flow is a
``jax.core.Tracer`` with no data yet, and this release runs no collective inside compiled code
(that is planned through XLA FFI custom calls, not Python callbacks), so such calls raise
``NotSupportedError``. ``jax.grad`` of an eager function is different: JAX calls the rules of a
``jax.custom_vjp`` with concrete values there, so allreduce, allgather, broadcast, alltoall and
reducescatter (and their grouped forms) carry Horovod's gradients from ``hora.common.gradients``.
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

__all__ = api.__all__ + [
    "EAGER_ONLY", "allgather", "allreduce", "alltoall", "barrier", "broadcast",
    "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "join", "reducescatter",
]

EAGER_ONLY = "hora.jax collectives run eagerly in this release; call them outside jax.jit"
"""The start of the message of the ``NotSupportedError`` raised for a traced argument."""

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


# ------------------------------------------------------------------------------------- helpers


def _is_traced(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


def refuse_traced(values: Sequence[Any], what: str) -> None:
    """Raise when any of ``values`` is being traced (it has no data for the engine to send).

    Raises:
        NotSupportedError: a value is a ``jax.core.Tracer``.
    """
    for value in values:
        if _is_traced(value):
            raise NotSupportedError(
                f"{EAGER_ONLY} (nor under jax.vmap, jax.lax loops or other transformations "
                f"that trace); {what} got the traced value {type(value).__name__}. Compute "
                "gradients with jax.jit(jax.grad(loss)) and reduce them after the jitted call "
                "(hvd.DistributedOptimizer does this). Collectives inside compiled code are "
                "planned through XLA FFI custom calls."
            )


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
    set_id = int(getattr(process_set, "process_set_id", 0) or 0)
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
    handles = ops.enqueue_call(collective, buffers, None, names, False, op, average, prescale,
                               postscale, root_rank, splits, process_set, 3)
    ops.wait_all(handles)
    return handles


def _outputs(handles: list, arrays: Sequence[Any]) -> list[jax.Array]:
    return [_to_jax(ops.allocated_output(h), np.dtype(a.dtype)) for h, a in zip(handles, arrays)]


Forward = Callable[[list], tuple[list, Any]]
Backward = Callable[[Any, list], list]


def _dispatch(arrays: list, what: str, forward: Forward, backward: Backward) -> list:
    """Run ``forward`` on concrete ``arrays``; on traced ones, through a ``jax.custom_vjp``.

    ``forward(arrays) -> (outputs, residuals)`` and ``backward(residuals, cotangents) ->
    input cotangents`` see concrete values only: eager ``jax.grad`` gives them those; every
    other trace (jit, vmap) reaches ``refuse_traced``.
    """
    for array in arrays:
        if not _is_traced(array):
            _check_array(array, what)
    if not any(_is_traced(a) for a in arrays):
        return forward(arrays)[0]

    @jax.custom_vjp
    def collective(*xs: Any) -> tuple:
        refuse_traced(xs, what)
        return tuple(forward(list(xs))[0])

    def collective_fwd(*xs: Any) -> tuple:
        refuse_traced(xs, what)
        outputs, residuals = forward(list(xs))
        return tuple(outputs), residuals

    def collective_bwd(residuals: Any, cotangents: tuple) -> tuple:
        refuse_traced(cotangents, f"the gradient of {what}")
        return tuple(backward(residuals, list(cotangents)))

    collective.defvjp(collective_fwd, collective_bwd)
    return list(collective(*arrays))


# ----------------------------------------------------------------------------------- allreduce


def _allreduce_list(arrays: list, names: list[str], what: str, op: int | None,
                    average: bool | None, prescale: float, postscale: float,
                    process_set: ProcessSet) -> list[jax.Array]:
    resolved = ops.handle_average_backwards_compatibility(op, average)

    def forward(xs: list) -> tuple[list, Any]:
        hosts = [_host_copy(x) for x in xs]
        _run("allreduce", hosts, names, op=resolved, prescale=prescale, postscale=postscale,
             process_set=process_set)
        return [_to_jax(h, h.dtype) for h in hosts], None

    def backward(_: Any, cts: list) -> list:
        gradients.check_differentiable(resolved, what)
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
        tensor: a concrete ``jax.Array`` of uint8, int8, uint16, int16, int32, int64, float16,
            bfloat16, float32, float64 or bool.
        average: deprecated; use ``op`` (``average=True`` is Average, ``False`` is Sum).
        name: tensor name, equal on every rank (default: an automatic name, which needs every
            rank to issue unnamed operations in the same order).
        op: Average (default), Sum, Min, Max, Product or Adasum.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks taking part.

    Raises:
        NotSupportedError: ``tensor`` is traced (inside jax.jit or jax.vmap).
        TypeError: ``tensor`` is not an array.
        ValueError: bad arguments or an unsupported dtype.
        HoraError: the ranks disagree (MismatchError) or the job failed.
    """
    names = _names("allreduce", name, 1, False, process_set)
    return _allreduce_list([tensor], names, "allreduce", op, average, prescale_factor,
                           postscale_factor, process_set)[0]


def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None,
                      name: str | None = None, op: int | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[jax.Array]:
    """Return the reductions of every tensor, negotiated and fused as one group.

    Tensor names are ``grouped_allreduce.<name>_<i>of<n>``; other arguments and errors as in
    :func:`allreduce`.
    """
    tensors = list(tensors)
    names = _names("allreduce", name, len(tensors), True, process_set)
    return _allreduce_list(tensors, names, "grouped_allreduce", op, average, prescale_factor,
                           postscale_factor, process_set)


# ----------------------------------------------------------------------------------- allgather


def _allgather_list(arrays: list, names: list[str], what: str,
                    process_set: ProcessSet) -> list[jax.Array]:
    dims = [int(a.shape[0]) if a.ndim > 0 else 1 for a in arrays]

    def forward(xs: list) -> tuple[list, Any]:
        handles = _run("allgather", [_readable(x) for x in xs], names, process_set=process_set)
        return _outputs(handles, xs), None

    def backward(_: Any, cts: list) -> list:
        hosts = [_host_copy(c) for c in cts]
        out = gradients.allgather_grad(hosts, dims, process_set)()
        return [_to_jax(np.ascontiguousarray(g), g.dtype) for g in out]

    return _dispatch(arrays, what, forward, backward)


def allgather(tensor: Any, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> jax.Array:
    """Concatenate ``tensor`` from every rank of the set along dimension 0.

    The first dimension may differ between ranks; the others must match.

    Raises:
        NotSupportedError: ``tensor`` is traced.
        ValueError: a scalar tensor or an unsupported dtype.
        HoraError: the ranks disagree on dtype or trailing shape.
    """
    names = _names("allgather", name, 1, False, process_set)
    return _allgather_list([tensor], names, "allgather", process_set)[0]


def grouped_allgather(tensors: Sequence[Any], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[jax.Array]:
    """Allgather every tensor as one group; returns the gathered arrays in order.

    Raises:
        NotSupportedError: a tensor is traced.
        HoraError: the ranks disagree on a tensor's dtype or trailing shape.
    """
    tensors = list(tensors)
    names = _names("allgather", name, len(tensors), True, process_set)
    return _allgather_list(tensors, names, "grouped_allgather", process_set)


# ----------------------------------------------------------------------------------- broadcast


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> jax.Array:
    """Return the value of ``tensor`` on ``root_rank`` (a global rank) as a new array.

    Raises:
        NotSupportedError: ``tensor`` is traced.
        ValueError: ``root_rank`` is not in the process set.
        HoraError: the ranks disagree on root, dtype or shape.
    """
    names = _names("broadcast", name, 1, False, process_set)
    return grouped_broadcast_as([tensor], names, root_rank, "broadcast", process_set)[0]


def grouped_broadcast_as(tensors: list, names: list[str], root_rank: int, what: str,
                         process_set: ProcessSet) -> list[jax.Array]:
    """Broadcast ``tensors`` from ``root_rank`` as one group under the given engine ``names``
    (used by :func:`broadcast` and ``broadcast_parameters``).

    Raises:
        NotSupportedError: a tensor is traced.
        ValueError: ``root_rank`` is not in the process set.
        HoraError: the ranks disagree on root, dtype or shape.
    """

    def forward(xs: list) -> tuple[list, Any]:
        hosts = [_host_copy(x) for x in xs]
        _run("broadcast", hosts, names, root_rank=root_rank, process_set=process_set)
        return [_to_jax(h, h.dtype) for h in hosts], None

    def backward(_: Any, cts: list) -> list:
        out = gradients.broadcast_grad([_host_copy(c) for c in cts], root_rank, process_set)()
        return [_to_jax(g, g.dtype) for g in out]

    return _dispatch(list(tensors), what, forward, backward)


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
        NotSupportedError: ``tensor`` or ``splits`` is traced.
        InvalidCollectiveError: splits that do not fit the set or the tensor.
    """
    refuse_traced([splits], "alltoall (splits)")
    host_splits = None if splits is None else np.asarray(splits)
    names = _names("alltoall", name, 1, False, process_set)
    dim0 = int(tensor.shape[0]) if getattr(tensor, "ndim", 0) > 0 else 0

    def forward(xs: list) -> tuple[list, Any]:
        handles = _run("alltoall", [_readable(xs[0])], names, splits=host_splits,
                       process_set=process_set)
        received = np.asarray(handles[0].received_splits(), dtype=np.int32)
        return [*_outputs(handles, xs), jnp.asarray(received)], received

    def backward(received: Any, cts: list) -> list:
        back = gradients.alltoall_grad(_host_copy(cts[0]), [int(r) for r in received], dim0,
                                       process_set)()
        return [_to_jax(np.ascontiguousarray(back), np.dtype(cts[0].dtype))]

    out, received = _dispatch([tensor], "alltoall", forward, backward)
    return out if splits is None else (out, received)


# ------------------------------------------------------------------------------- reducescatter


def _reducescatter_list(arrays: list, names: list[str], what: str, op: int, prescale: float,
                        postscale: float, process_set: ProcessSet) -> list[jax.Array]:

    def forward(xs: list) -> tuple[list, Any]:
        handles = _run("reducescatter", [_readable(x) for x in xs], names, op=op,
                       prescale=prescale, postscale=postscale, process_set=process_set)
        return _outputs(handles, xs), None

    def backward(_: Any, cts: list) -> list:
        gradients.check_differentiable(op, what)
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
        NotSupportedError: ``tensor`` is traced.
        InvalidCollectiveError: an op other than Sum or Average.
        ValueError: a scalar tensor.
    """
    names = _names("reducescatter", name, 1, False, process_set)
    return _reducescatter_list([tensor], names, "reducescatter", op, prescale_factor,
                               postscale_factor, process_set)[0]


def grouped_reducescatter(tensors: Sequence[Any], op: int = Average, name: str | None = None,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[jax.Array]:
    """Reducescatter every tensor as one group; returns this rank's shares in order.

    Raises:
        NotSupportedError: a tensor is traced.
        InvalidCollectiveError: an op other than Sum or Average.
    """
    tensors = list(tensors)
    names = _names("reducescatter", name, len(tensors), True, process_set)
    return _reducescatter_list(tensors, names, "grouped_reducescatter", op, prescale_factor,
                               postscale_factor, process_set)


# ----------------------------------------------------------------------------- other functions


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Block until every rank of the set has reached the barrier."""
    _numpy_api.barrier(process_set)


def join() -> int:
    """Declare that this rank has no more batches; until every rank has joined, it contributes
    zeros to the allreduces of the others. Returns the last rank to join (equal on all ranks)."""
    return _numpy_api.join()
