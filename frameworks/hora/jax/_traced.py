"""The collectives and their gradients on traced values (inside ``jax.jit``, ``jax.lax`` control
flow, ``jax.grad`` under jit): each call is one custom call of ``hora.jax._ffi``.

Shapes are fixed at trace time, so inside jit: allgather needs the same first dimension on every
rank, alltoall splits equally, and reducescatter's share of the rows follows from this rank's
place in the set. The gradients follow Horovod's conventions, as ``hora.common.gradients``
states them for the eager path:

- allreduce: the allreduce of the gradient with the same op and scale factors;
- allgather: this rank's rows of the Average-allreduce of the gradient;
- broadcast: the Average-allreduce of the gradient on the root, zero on every other rank;
- alltoall: the alltoall of the gradient back;
- reducescatter: the allgather of the gradient, times the factors of
  ``gradients.reducescatter_grad_factors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from hora import _core
from hora.common import basics, gradients, ops
from hora.common.process_sets import ProcessSet
from hora.errors import NotSupportedError
from hora.jax import _ffi


class Call:
    """What one traced call shares with its gradient: names, call site, process set."""

    def __init__(self, prefix: str, name: str | None, arrays: Sequence[Any],
                 process_set: ProcessSet, grouped: bool = False) -> None:
        self.process_set = process_set
        self.set_id = ops.process_set_id(process_set)
        self.site = _ffi.call_site()
        base = _ffi.traced_base(f"grouped_{prefix}" if grouped else prefix, name, self.set_id,
                                self.site, arrays)
        n = len(arrays)
        self.names = [f"{base}_{i + 1}of{n}" for i in range(n)] if grouped else [base]

    def grad_names(self) -> list[str]:
        return [f"{n}.grad" for n in self.names]

    def set_size(self) -> int:
        return gradients.set_size(self.process_set)

    def set_rank(self) -> int:
        return int(self.process_set.rank() or 0)

    def run(self, kind: int, arrays: Sequence[Any], out_avals: Sequence[tuple],
            names: Sequence[str], op: int = ops.Sum, prescale: float = 1.0,
            postscale: float = 1.0, root_rank: int = 0) -> list:
        _core.check_traced(kind, list(names), [tuple(a.shape) for a in arrays], int(op),
                           int(root_rank), self.set_id)
        return _ffi.bind(kind, arrays, names, out_avals, reduce_op=op, prescale=prescale,
                         postscale=postscale, root_rank=root_rank,
                         process_set_id=self.set_id, call_site=self.site)


def _same(arrays: Sequence[Any]) -> list[tuple]:
    return [(a.shape, a.dtype) for a in arrays]


def _scaled(array: Any, factor: float) -> Any:
    """``array * factor`` in the array's dtype (integers through floating point, truncated)."""
    if jnp.issubdtype(array.dtype, jnp.floating):
        return array * jnp.asarray(factor, array.dtype)
    return (array.astype(jnp.float32) * factor).astype(array.dtype)


# --------------------------------------------------------------------------------- allreduce

def allreduce(call: Call, xs: Sequence[Any], op: int, prescale: float, postscale: float,
              grad: bool = False) -> list:
    names = call.grad_names() if grad else call.names
    return call.run(ops.ALLREDUCE, xs, _same(xs), names, op, prescale, postscale)


def allreduce_grad(call: Call, cts: Sequence[Any], op: int, prescale: float,
                   postscale: float) -> list:
    return allreduce(call, cts, op, prescale, postscale, grad=True)


# --------------------------------------------------------------------------------- allgather

def allgather(call: Call, xs: Sequence[Any]) -> list:
    size = call.set_size()
    avals = [((a.shape[0] * size, *a.shape[1:]), a.dtype) for a in xs]
    return call.run(ops.ALLGATHER, xs, avals, call.names)


def allgather_grad(call: Call, cts: Sequence[Any], dims: Sequence[int]) -> list:
    reduced = call.run(ops.ALLREDUCE, cts, _same(cts), call.grad_names(), ops.Average)
    me = call.set_rank()
    return [r[me * d:(me + 1) * d] for r, d in zip(reduced, dims)]


# --------------------------------------------------------------------------------- broadcast

def broadcast(call: Call, xs: Sequence[Any], root_rank: int) -> list:
    return call.run(ops.BROADCAST, xs, _same(xs), call.names, root_rank=root_rank)


def broadcast_grad(call: Call, cts: Sequence[Any], root_rank: int) -> list:
    reduced = call.run(ops.ALLREDUCE, cts, _same(cts), call.grad_names(), ops.Average)
    if basics.rank() == root_rank:
        return reduced
    return [jnp.zeros_like(r) for r in reduced]


# ---------------------------------------------------------------------------------- alltoall

def refuse_splits(splits: Any) -> None:
    if splits is not None:
        raise NotSupportedError(
            "alltoall inside jax.jit splits the first dimension equally (splits=None): the "
            "rows each rank receives must be known when the program is traced"
        )


def alltoall(call: Call, x: Any, grad: bool = False) -> list:
    names = call.grad_names() if grad else call.names
    return call.run(ops.ALLTOALL, [x], _same([x]), names)


# ----------------------------------------------------------------------------- reducescatter

def reducescatter(call: Call, xs: Sequence[Any], op: int, prescale: float,
                  postscale: float) -> list:
    size, me = call.set_size(), call.set_rank()
    avals = []
    for a in xs:
        rows = a.shape[0] // size + (1 if me < a.shape[0] % size else 0) if a.ndim else 0
        avals.append(((rows, *a.shape[1:]), a.dtype))
    return call.run(ops.REDUCESCATTER, xs, avals, call.names, op, prescale, postscale)


def reducescatter_grad(call: Call, cts: Sequence[Any], dims: Sequence[int], op: int,
                       prescale: float, postscale: float) -> list:
    avals = [((d, *c.shape[1:]), c.dtype) for c, d in zip(cts, dims)]
    gathered = call.run(ops.ALLGATHER, cts, avals, call.grad_names())
    for factor in gradients.reducescatter_grad_factors(op, prescale, postscale,
                                                       call.set_size()):
        gathered = [_scaled(g, factor) for g in gathered]
    return gathered
