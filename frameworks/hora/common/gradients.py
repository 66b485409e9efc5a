"""The gradient of every collective, written once at the level of engine buffers.

Each rule takes the output gradients as buffers the engine accepts (NumPy arrays or any
``__dlpack__`` tensor, private to the rule: in-place rules write into them), submits the
collectives the gradient needs and returns a ``finish()`` that waits and returns the input
gradients. A graph frontend submits in one node and waits in another, so that ranks running
gradient nodes in different orders never hold each other's threads; an eager one calls
``rule(...)()``. A frontend's autodiff adapter only converts its tensors to buffers and the
results back. Horovod's conventions:

- allreduce: the allreduce of the gradient with the same op and scale factors;
- allgather: this rank's rows of the Average-allreduce of the gradient;
- broadcast: the Average-allreduce of the gradient on the root, zero on every other rank;
- alltoall: the alltoall of the gradient back with the received splits, zero rows for the
  rows that were never sent;
- reducescatter: the allgather of the gradient, multiplied by the set size for Sum, then by the
  prescale factor, then by the postscale factor (one multiplication each, in the gradient's
  dtype, so the result is bit-identical to Horovod's).

Names: ``names`` when given (they must match across ranks), else automatic names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from hora.common import basics, ops
from hora.common.process_sets import ProcessSet

DIFFERENTIABLE_REDUCE_OPS = (ops.Average, ops.Sum)

# What a rule returns: waits for its collectives, then gives the input gradients.
Finish = Callable[[], Any]


def check_differentiable(op: int, what: str) -> None:
    """Refuse the gradient of a reduction other than Average and Sum.

    Raises:
        NotImplementedError: ``op`` is Adasum, Min, Max or Product.
    """
    if op not in DIFFERENTIABLE_REDUCE_OPS:
        raise NotImplementedError(
            f"the gradient of {what} is only defined for Average and Sum (got op {op})"
        )


def scale_array(array: Any, factor: float) -> Any:
    """``array * factor`` keeping the dtype (integers go through float64 and truncate)."""
    if factor == 1.0:
        return array
    array = np.asarray(array)
    if np.issubdtype(array.dtype, np.floating):
        return array * array.dtype.type(factor)
    return (array.astype(np.float64) * factor).astype(array.dtype)


def set_size(process_set: ProcessSet) -> int:
    """The number of ranks of ``process_set``.

    Raises:
        ValueError: the set is not registered.
    """
    size = process_set.size()
    if size is None:
        raise ValueError(f"the process set {process_set} is not registered")
    return size


def _grouped(names: Sequence[str] | None, count: int) -> bool:
    return names is None and count > 1


def allreduce_grad(grads: Sequence[Any], op: int, prescale: float, postscale: float,
                   process_set: ProcessSet, names: Sequence[str] | None = None) -> Finish:
    """Gradient of (grouped) allreduce, reduced in place into ``grads``; finish returns them."""
    grads = list(grads)
    handles = ops.enqueue("allreduce", grads, names=names, grouped=_grouped(names, len(grads)),
                          op=op, prescale=prescale, postscale=postscale, process_set=process_set)

    def finish() -> list:
        ops.wait_all(handles)
        return grads

    return finish


def allgather_grad(grads: Sequence[Any], dims: Sequence[int], process_set: ProcessSet,
                   names: Sequence[str] | None = None, dims_name: str | None = None) -> Finish:
    """Gradient of (grouped) allgather: ``dims`` are this rank's dim 0 of each input; finish
    returns this rank's rows of each averaged gradient (views of ``grads``)."""
    grads = list(grads)
    table = np.array(dims, dtype=np.int64).reshape(1, len(grads))
    handles = ops.enqueue("allreduce", grads, names=names, grouped=_grouped(names, len(grads)),
                          op=ops.Average, process_set=process_set)
    dims_handles = ops.enqueue("allgather", [table], process_set=process_set,
                               names=None if dims_name is None else [dims_name])

    def finish() -> list:
        ops.wait_all(handles + dims_handles)
        gathered = ops.allocated_output(dims_handles[0]).reshape(set_size(process_set),
                                                                 len(grads))
        starts = np.concatenate([np.zeros((1, len(grads)), np.int64),
                                 np.cumsum(gathered, axis=0)])
        me = process_set.rank() or 0
        return [g[int(s):int(s) + int(n)] for g, s, n in zip(grads, starts[me], gathered[me])]

    return finish


def broadcast_grad(grads: Sequence[Any], root_rank: int, process_set: ProcessSet,
                   names: Sequence[str] | None = None) -> Finish:
    """Gradient of broadcast, in place into ``grads``: averaged on the root, zero elsewhere."""
    reduced = allreduce_grad(grads, ops.Average, 1.0, 1.0, process_set, names)

    def finish() -> list:
        out = reduced()
        if basics.rank() != root_rank:
            for g in out:
                g[...] = 0
        return out

    return finish


def alltoall_grad(grad: Any, received_splits: Sequence[int], dim0: int,
                  process_set: ProcessSet, name: str | None = None) -> Finish:
    """Gradient of alltoall: finish returns the gradient's rows sent back where they came from,
    padded with zero rows up to the input's ``dim0`` (rows beyond the splits were never sent)."""
    handles = ops.enqueue("alltoall", [grad], names=None if name is None else [name],
                          splits=[int(s) for s in received_splits], process_set=process_set)

    def finish() -> np.ndarray:
        ops.wait_all(handles)
        back = ops.allocated_output(handles[0])
        if back.shape[0] < dim0:
            unsent = np.zeros((dim0 - back.shape[0], *back.shape[1:]), dtype=back.dtype)
            back = np.concatenate([back, unsent])
        return back

    return finish


def reducescatter_grad_factors(op: int, prescale: float, postscale: float,
                               size: int) -> list[float]:
    """The factors the reducescatter gradient is multiplied by, in order: the set size for Sum,
    then the prescale and postscale factors (factors of 1 are left out)."""
    factors = [float(size)] if op == ops.Sum else []
    return [f for f in (*factors, prescale, postscale) if f != 1.0]


def reducescatter_grad(grads: Sequence[Any], op: int, prescale: float, postscale: float,
                       process_set: ProcessSet, names: Sequence[str] | None = None,
                       wrap: Callable[[np.ndarray, Any], Any] = lambda array, grad: array,
                       scale: Callable[[Any, float], Any] = scale_array) -> Finish:
    """Gradient of (grouped) reducescatter: finish returns the allgathered gradients, scaled as
    Horovod does. ``wrap(array, grad)`` turns each gathered array into the frontend's form
    before ``scale``.
    """
    grads = list(grads)
    handles = ops.enqueue("allgather", grads, names=names, grouped=_grouped(names, len(grads)),
                          process_set=process_set)

    def finish() -> list:
        ops.wait_all(handles)
        factors = reducescatter_grad_factors(op, prescale, postscale, set_size(process_set))
        outs = [wrap(ops.allocated_output(h), g) for h, g in zip(handles, grads)]
        for factor in factors:
            outs = [scale(o, factor) for o in outs]
        return outs

    return finish
