"""Collectives in TensorFlow graphs as two nodes: a submit node that never blocks and a wait node.

The submit node hands its inputs to the engine and returns at once with a token (an int64
scalar); the wait node takes the token, waits for the engine and returns the results. Eagerly
both halves run at once, the submit when it is called and the wait when its results are asked
for, so a caller that submits several collectives before waiting for any overlaps them.

Why a graph built this way cannot deadlock, whatever the number of collectives and inter-op
threads and whatever order TensorFlow picks for ready nodes:

- Every wait node has a control dependency on every submit node created before it in the same
  graph and control-flow context, its own included (see below for placeholders). The edges go
  through chains of ``NoOp`` gates, one gate per submit, so n collectives add O(n) edges.
- Submit nodes never block, and the engine completes a collective once every rank has
  submitted it, whatever the ranks' wait nodes are doing (it negotiates by name on its own
  thread).
- Suppose every rank were stuck. Take, among the wait nodes blocked on any rank, the one
  created first, w; its collective c waits for some rank q that has not run c's submit s.
  Each wait blocked on q was created no earlier than w, so it depends on s: s has run on q,
  a contradiction, unless q has a free thread and nothing runnable. Then s waits for data
  from an unfinished node; following the unfinished inputs back, one reaches either a
  runnable node (q is not stuck) or a blocked wait whose output feeds s, which was created
  before s and so before w, against the choice of w.

The ranks must build the same graph and run the same fetches (they already must, to agree on
the names). Nodes that block in one piece (join, barrier) are outside this argument; inside a
``tf.function`` TensorFlow keeps them in program order. Gradient nodes are submit and wait
nodes too (``hora.tensorflow.mpi_ops``).

Inside a ``tf.function``, TensorFlow would serialize stateful nodes in program order, which
would keep gradient reductions from starting as soon as each gradient exists: both nodes are
marked as independent side effects, so only the edges above order them (and both always run).

In a ``tf.compat.v1.Session`` graph a wait may pull in an earlier submit whose own wait is not
fetched in that step. The engine runs that collective anyway (every rank runs the same fetches);
the next time the same submit node runs, or one submitting under the same engine names (the same
collective in a graph built again), it first drains the unclaimed result. That wait ends: every
rank submitted the collective in that earlier step. A wait does not depend on earlier submits
that read a placeholder its own collectives do not read: those belong to another kind of step
(evaluation fed differently than training, say) and could not run without their feeds. A step
that fetches a collective reading a placeholder together with one created later that does not
read it has the two unordered: the one case the argument above does not cover.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from hora.common import basics, call_sites
from hora.errors import InvalidCollectiveError, MismatchError
from hora.tensorflow._host import as_numpy_dtype, to_tensor


class FailedPreconditionError(tf.errors.FailedPreconditionError, MismatchError):
    """Ranks disagreed on an operation: TensorFlow's error class for it (as Horovod raises it),
    and Hora's ``MismatchError``."""


class InvalidArgumentError(tf.errors.InvalidArgumentError, InvalidCollectiveError):
    """An operation refused as invalid (by the engine, or by the checks made when it is
    submitted): TensorFlow's error class for it (as Horovod raises it), and Hora's
    ``InvalidCollectiveError``, a ``ValueError``."""


def _as_tf_error(exc: BaseException) -> BaseException:
    """``exc`` as the TensorFlow error Horovod raises for it, when there is one. Inside a graph
    TensorFlow then reports the same error class (it keeps an ``OpError``'s code)."""
    if isinstance(exc, tf.errors.OpError):
        return exc
    if isinstance(exc, MismatchError):
        return FailedPreconditionError(None, None, str(exc))
    if isinstance(exc, ValueError):  # refused by the engine or by the checks at submission
        return InvalidArgumentError(None, None, str(exc))
    return exc


def _converting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` raising ``_as_tf_error`` of what it raises."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            converted = _as_tf_error(exc)
            if converted is exc:
                raise
            raise converted from exc

    return call


# ``start(sources)`` submits to the engine and returns ``finish()``, which waits and returns
# the results (NumPy arrays).
Finish = Callable[[], list]
Start = Callable[[list], Finish]

_lock = threading.Lock()
# Each pending result by token: what finishes it, and the engine names it holds.
_pending: dict[int, tuple[Finish, tuple[str, ...]]] = {}
_holder: dict[str, int] = {}  # the token of the pending result holding each name
_tokens = itertools.count(1)


def _register(finish: Finish, names: tuple[str, ...] = ()) -> int:
    with _lock:
        token = next(_tokens)
        _pending[token] = (finish, names)
        for name in names:
            _holder[name] = token
    return token


def _take(token: int) -> Finish | None:
    with _lock:
        entry = _pending.pop(token, None)
        if entry is None:
            return None
        finish, names = entry
        for name in names:
            if _holder.get(name) == token:
                del _holder[name]
        return finish


def _holders(names: tuple[str, ...]) -> list[int]:
    """The pending results that hold any of ``names``, oldest first."""
    with _lock:
        return sorted({_holder[name] for name in names if name in _holder})


def _drop_unclaimed() -> None:
    """Shutdown hook: the unclaimed results of the ended job can no longer be claimed, and they
    kept their memory (its shared arena's, too) until the same submit node, or one of their
    names, ran again, which a discarded graph's never does."""
    with _lock:
        _pending.clear()
        _holder.clear()


basics.add_shutdown_hook(_drop_unclaimed)


def _drain(token: int) -> None:
    """Wait for a submitted collective whose results nobody claimed, and drop them."""
    finish = _take(token)
    if finish is not None:
        with contextlib.suppress(Exception):  # the results, errors included, were not wanted
            finish()


class _GraphGates:
    """The gate chains of one graph, keyed by control-flow context and by the placeholders the
    chain's submits read: the last gate of each."""

    __slots__ = ("feeds", "gates")

    def __init__(self) -> None:
        self.gates: dict[tuple[int, frozenset], tf.Operation] = {}
        self.feeds: dict[str, frozenset] = {}


_graphs: weakref.WeakKeyDictionary[Any, _GraphGates] = weakref.WeakKeyDictionary()

_PLACEHOLDERS = frozenset(("Placeholder", "PlaceholderV2"))


def _gates(graph: Any) -> _GraphGates:
    gates = _graphs.get(graph)
    if gates is None:
        gates = _GraphGates()
        _graphs[graph] = gates
    return gates


def _feeds(gates: _GraphGates, tensors: Sequence[tf.Tensor]) -> frozenset:
    """The names of the placeholders (without default) that ``tensors`` depend on."""
    memo = gates.feeds
    result: set = set()
    stack = [t.op for t in tensors]
    entered: set = set()
    while stack:
        op = stack[-1]
        if op.name in memo:
            stack.pop()
            continue
        parents = [t.op for t in op.inputs] + list(op.control_inputs)
        # A parent already entered closes a cycle (a v1 while loop's back edge): skipped.
        missing = [p for p in parents if p.name not in memo and p.name not in entered]
        if missing and op.name not in entered:
            entered.add(op.name)
            stack.extend(missing)
            continue
        stack.pop()
        own = {op.name} if op.type in _PLACEHOLDERS else set()
        memo[op.name] = frozenset(own.union(*(memo.get(p.name, frozenset()) for p in parents)))
    for t in tensors:
        result |= memo[t.op.name]
    return frozenset(result)


def _context_key(graph: Any) -> int:
    getter = getattr(graph, "_get_control_flow_context", None)
    return id(getter()) if getter is not None else 0


def _run_independently(op: tf.Operation) -> None:
    """Exempt ``op`` from ``tf.function``'s program-order chaining of stateful nodes (it still
    always runs)."""
    graph = op.graph
    manager = getattr(graph, "experimental_acd_manager", None)
    if getattr(graph, "_add_control_dependencies", False) and manager is not None:
        manager.run_independently(op)


class Submitted:
    """One submitted collective: eagerly its ``finish``; in a graph its token tensor and the
    output dtypes of its wait."""

    __slots__ = ("feeds", "finish", "op_name", "out_dtypes", "token")

    def __init__(self, out_dtypes: Sequence[tf.DType], op_name: str,
                 finish: Finish | None = None, token: tf.Tensor | None = None,
                 feeds: frozenset = frozenset()) -> None:
        self.out_dtypes = list(out_dtypes)
        self.op_name = op_name
        self.finish = finish
        self.token = token
        self.feeds = feeds


def submit(start: Start, inputs: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
           op_name: str, names: Sequence[str] = ()) -> Submitted:
    """Submit ``start(sources)`` on ``inputs`` (at once eagerly; as a submit node while tracing).

    ``start`` must not modify its sources and must keep them referenced until ``finish`` ran.
    ``names``: the engine names it submits under, when the caller knows them (a gradient rule
    names its collectives itself).
    """
    inputs = list(inputs)
    names = tuple(names)
    begin = _converting(start)
    if tf.executing_eagerly():
        return Submitted(out_dtypes, op_name, finish=_converting(begin(inputs)))
    graph = tf.compat.v1.get_default_graph()
    gates = _gates(graph)
    # A function's placeholders are its arguments, always fed.
    feeds = frozenset() if graph.building_function else _feeds(gates, inputs)
    last_token: list[int | None] = [None]
    built_at = call_sites.call_site()  # what stall and deadlock reports name

    def submit_node(*arrays: np.ndarray) -> np.ndarray:
        # An unclaimed result of this node's earlier run, or under its names (the same collective
        # in a graph built again), may still be in flight, and the engine refuses a name in
        # flight.
        previous = last_token[0]
        if previous is not None:
            _drain(previous)
        for held in _holders(names):
            _drain(held)
        finish = call_sites.run_as_if_from(built_at, begin, [np.asarray(a) for a in arrays])
        token = _register(_converting(finish), names)
        last_token[0] = token
        return np.array(token, dtype=np.int64)

    token = tf.numpy_function(submit_node, inputs, tf.int64, stateful=True,
                              name=f"{op_name}Submit")
    token.set_shape([])
    _run_independently(token.op)
    key = (_context_key(graph), feeds)
    previous_gate = gates.gates.get(key)
    deps = [token.op] if previous_gate is None else [previous_gate, token.op]
    with tf.control_dependencies(deps):
        gates.gates[key] = tf.no_op(name=f"{op_name}Gate")
    return Submitted(out_dtypes, op_name, token=token, feeds=feeds)


def _finish_all(finishes: Sequence[Finish | None], items: Sequence[Submitted]) -> list[list]:
    """Every collective's results; each one is waited for before the first error is raised,
    so that none of their names stays in flight."""
    results: list[list] = []
    first_error: BaseException | None = None
    for finish, item in zip(finishes, items):
        try:
            if finish is None:
                raise RuntimeError(f"{item.op_name}: the collective was not submitted")
            results.append(finish())
        except Exception as exc:  # noqa: BLE001 (every collective is waited for first)
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return results


def wait(items: Sequence[Submitted], op_name: str | None = None) -> list[list[tf.Tensor]]:
    """The results of submitted collectives, one list per item (one wait node for all of them
    in a graph)."""
    items = list(items)
    if not items:
        return []
    if tf.executing_eagerly():
        finished = _finish_all([item.finish for item in items], items)
        return [[to_tensor(o, d) for o, d in zip(outs, item.out_dtypes)]
                for outs, item in zip(finished, items)]
    graph = tf.compat.v1.get_default_graph()
    context = _context_key(graph)
    feeds = frozenset().union(*(item.feeds for item in items))
    deps = [gate for (ctx, chain_feeds), gate in _gates(graph).gates.items()
            if ctx == context and chain_feeds <= feeds]
    counts = [len(item.out_dtypes) for item in items]
    out_dtypes = [d for item in items for d in item.out_dtypes]

    def wait_node(*tokens: np.ndarray) -> list:
        finished = _finish_all([_take(int(t)) for t in tokens], items)
        return [as_numpy_dtype(np.asarray(o), d)
                for outs, item in zip(finished, items) for o, d in zip(outs, item.out_dtypes)]

    with tf.control_dependencies(deps):
        outs = tf.numpy_function(wait_node, [item.token for item in items], out_dtypes,
                                 stateful=True, name=op_name or items[0].op_name)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    _run_independently(outs[0].op)
    results, start = [], 0
    for count in counts:
        results.append(outs[start:start + count])
        start += count
    return results


def run(start: Start, inputs: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
        op_name: str, names: Sequence[str] = ()) -> list[tf.Tensor]:
    """Submit and wait for one collective: ``wait([submit(...)])[0]``."""
    return wait([submit(start, inputs, out_dtypes, op_name, names)])[0]
