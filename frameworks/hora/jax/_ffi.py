"""Hora's collectives inside ``jax.jit``: one JAX primitive lowered to an XLA FFI custom call.

The custom call's handler lives in ``hora._core`` (``bindings/jax_ffi.cc``): XLA calls it on its
own thread without Python, and it hands XLA's buffers to the engine as one group. Three things
make that safe:

- **Order.** The primitive carries an ordered effect, so every call takes and returns a token
  and XLA runs the calls of a program in program order (independent side-effecting calls
  without one may be reordered). Every rank runs the same program, so every rank blocks on the
  same sequence of collectives. ``jax._src.effects`` is private: the jax version is pinned.
- **Names.** A call's tensor names are fixed when it is traced: ``<prefix>.<name>`` for a named
  call, else ``<prefix>.jit.<file>:<line>`` of the user's call plus a count of earlier calls
  from that line in the same trace. A retrace on one rank therefore gives the same names again,
  where a per-process counter would not.
- **Errors.** The handler starts its message with the Python class the eager path raises
  (``hora.errors.MismatchError: ...``); :func:`reraise` raises that class again from the
  ``JaxRuntimeError`` that XLA turns it into.

``vmap`` of a collective is refused with ``NotSupportedError``.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
import types
import weakref
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax._src import effects
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from hora import _core, errors
from hora.errors import NotSupportedError

TARGET = "hora_collective"

_IN_PLACE = frozenset({0, 2, 4})  # allreduce, broadcast, adasum: results alias their operands


class HoraEffect(effects.Effect):  # type: ignore[misc]
    """The ordered effect of every Hora collective: its calls keep program order."""

    def __str__(self) -> str:
        return "Hora"


EFFECT = HoraEffect()
for _registry in (effects.lowerable_effects, effects.ordered_effects,
                  effects.control_flow_allowed_effects,
                  effects.custom_derivatives_allowed_effects, effects.remat_allowed_effects):
    _registry.add_type(HoraEffect)

collective_p = Primitive("hora_collective")
collective_p.multiple_results = True

_registered = False
_register_lock = threading.Lock()


def _register_target() -> None:
    global _registered
    with _register_lock:
        if _registered:
            return
        for target, capsule in _core.jax_ffi_targets().items():
            jax.ffi.register_ffi_target(target, capsule, platform="cpu")
        _registered = True


# ---------------------------------------------------------------------------------- primitive


def _abstract_eval(*avals: Any, out_avals: tuple, **_: Any) -> tuple[list, set]:
    del avals
    return [jax.core.ShapedArray(shape, dtype) for shape, dtype in out_avals], {EFFECT}


def _row_major(ndim: int) -> tuple[int, ...]:
    return tuple(reversed(range(ndim)))


def _lowering(ctx: Any, *operands: Any, kind: int, reduce_op: int, prescale: float,
              postscale: float, root_rank: int, process_set_id: int, names: tuple[str, ...],
              call_site: str, out_avals: tuple) -> list:
    del out_avals  # ctx.avals_out has them
    token = ctx.tokens_in.get(EFFECT)
    result_types = [mlir.token_type(),
                    *(mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out)]
    aliases = ({i + 1: i + 1 for i in range(len(operands))} if kind in _IN_PLACE else None)
    call = jax.ffi.build_ffi_lowering_function(
        TARGET, result_types=result_types,
        operand_layouts=[(), *(_row_major(a.ndim) for a in ctx.avals_in)],
        result_layouts=[(), *(_row_major(a.ndim) for a in ctx.avals_out)],
        operand_output_aliases=aliases, has_side_effect=True, skip_ffi_layout_processing=True)
    op = call(ctx, token, *operands, kind=np.int64(kind), reduce_op=np.int64(reduce_op),
              prescale=np.float64(prescale), postscale=np.float64(postscale),
              root_rank=np.int64(root_rank), process_set_id=np.int64(process_set_id),
              names="\n".join(names), call_site=call_site)
    token_out, *outs = op.results
    ctx.set_tokens_out(mlir.TokenSet({EFFECT: token_out}))
    return outs


def _refuse_vmap(*_: Any, **__: Any) -> Any:
    raise NotSupportedError(
        "hora.jax collectives cannot run under jax.vmap: each call is one collective over the "
        "ranks, not one per batch element; reduce the batched result instead"
    )


def _impl(*arrays: Any, **params: Any) -> Any:
    """A bind outside any trace: run the primitive as its own jitted program."""
    return jax.jit(functools.partial(collective_p.bind, **params))(*arrays)


collective_p.def_effectful_abstract_eval(_abstract_eval)
collective_p.def_impl(_impl)
mlir.register_lowering(collective_p, _lowering, platform="cpu")
batching.primitive_batchers[collective_p] = _refuse_vmap


def bind(kind: int, arrays: Sequence[Any], names: Sequence[str], out_avals: Sequence[tuple],
         *, reduce_op: int = 1, prescale: float = 1.0, postscale: float = 1.0,
         root_rank: int = 0, process_set_id: int = 0, call_site: str = "") -> list:
    """One custom call running ``kind`` over ``arrays`` as one group under ``names``; returns
    the results, of the shapes and dtypes ``out_avals`` ((shape, dtype) pairs)."""
    _register_target()
    return list(collective_p.bind(
        *arrays, kind=int(kind), reduce_op=int(reduce_op), prescale=float(prescale),
        postscale=float(postscale), root_rank=int(root_rank),
        process_set_id=int(process_set_id), names=tuple(names), call_site=call_site,
        out_avals=tuple((tuple(int(d) for d in s), np.dtype(t)) for s, t in out_avals)))


# -------------------------------------------------------------------------------------- names

_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(str(module.__file__))) + os.sep
                      for module in (_core, jax))  # hora's package and jax's
_site_counts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def call_site() -> str:
    """``file:line`` of the nearest caller outside Hora and JAX (the user's call)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_LIBRARY_DIRS):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "unknown"


def traced_base(prefix: str, name: str | None, process_set_id: int, site: str,
                arrays: Sequence[Any]) -> str:
    """The base of a traced call's tensor names (see the module's docstring)."""
    if name:
        return f"{prefix}.{name}"  # as the eager call names it
    scope = prefix if process_set_id == 0 else f"{prefix}.set{process_set_id}"
    trace = next((getattr(a, "_trace", None) for a in arrays
                  if isinstance(a, jax.core.Tracer)), None)
    counts: dict[str, int] = {}
    if trace is not None:
        try:
            counts = _site_counts.setdefault(trace, {})
        except TypeError:  # a trace that cannot be weakly referenced: no count
            counts = {}
    k = counts.get(site, 0)
    counts[site] = k + 1
    return f"{scope}.jit.{site}" + (f".{k}" if k else "")


# ------------------------------------------------------------------------------------- errors

_TAGGED = re.compile(r"(?:hora\.errors\.(\w+)|(ValueError)): (.*)", re.DOTALL)


def reraise(exc: BaseException) -> BaseException:
    """The Hora error inside a ``jax.errors.JaxRuntimeError`` from a jitted collective (the
    class the eager call raises, with the engine's message), or ``exc`` itself."""
    match = _TAGGED.search(str(exc))
    if match is None:
        return exc
    cls_name, value_error, message = match.groups()
    cls = ValueError if value_error else getattr(errors, cls_name or "", None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return exc
    return cls(message.strip())
