"""Graphs with many independent collectives, in tf.compat.v1.Session graphs and tf.function.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_tensorflow_graphs.py``
(N = 1..4). TensorFlow may run the collectives of such a graph in a different order on every
rank, with fewer inter-op threads than collectives: each graph must still finish with the
right values. A regression must fail, not hang: every run happens in a thread joined with a
bound (a Session's own run deadline cannot stop a node that blocks), and the conftest watchdog
ends a rank that still hangs after that.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import hora.tensorflow as hvd
import numpy as np
import pytest
import tensorflow as tf
from conftest import hora_mappings, rank, size

# One inter-op thread for every tf.function here (as TensorFlow picks on one CPU, or when a
# rank is bound to one): each rank then runs one ready node at a time, in its own order.
tf.config.threading.set_inter_op_parallelism_threads(1)

COUNT = 64
BOUND_S = 60.0
# Fewer inter-op threads than collectives: with one blocking node per collective, ranks that
# start different collectives first would each hold every thread.
SESSION_CONFIG = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2,
                                          intra_op_parallelism_threads=1,
                                          use_per_session_threads=True)


def value(r: int, i: int) -> np.ndarray:
    """The input of collective ``i`` on rank ``r`` (rows differ by rank and by collective)."""
    return np.full([r % 3 + 1, 2], r * 1000 + i, np.float32)


def build(i: int) -> Any:
    """Collective ``i``: allgather for even i, Sum-allreduce for odd i."""
    x = tf.constant(value(rank(), i))
    if i % 2 == 0:
        return hvd.allgather(x, name=f"graph_gather_{i}")
    return hvd.allreduce(x[:1], op=hvd.Sum, name=f"graph_sum_{i}")


def expected(i: int) -> np.ndarray:
    """What collective ``i`` returns on every rank."""
    if i % 2 == 0:
        return np.concatenate([value(r, i) for r in range(size())])
    return np.sum([value(r, i)[:1] for r in range(size())], axis=0)


def check_all(results: list) -> None:
    """Each result equals its NumPy reference."""
    assert len(results) == COUNT
    for i, out in enumerate(results):
        np.testing.assert_array_equal(np.asarray(out), expected(i), err_msg=f"collective {i}")


def session_run(fetches: Any, graph: tf.Graph, session: Any = None, feeds: Any = None) -> Any:
    """``session.run(fetches)`` (in a new session when none is given), with a bound."""
    if session is not None:
        return bounded(lambda: session.run(fetches, feed_dict=feeds))
    with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
        return bounded(lambda: sess.run(fetches, feed_dict=feeds))


def bounded(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a thread, failing the test when it does not return within the bound."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (re-raised in the test's thread)
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():
        message = f"the graph did not finish within {BOUND_S} s"
        print(message, file=sys.stderr, flush=True)  # closing the session may hang next
        raise AssertionError(message)
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_session_graph_many_independent_collectives() -> None:
    """64 independent allgathers and allreduces in one Session graph, fetched together, twice
    in one session (the second run reuses the same nodes and names)."""
    graph = tf.Graph()
    with graph.as_default():
        outs = [build(i) for i in range(COUNT)]
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            for _ in range(2):
                check_all(session_run(outs, graph, sess))


def test_session_graph_chained_collectives() -> None:
    """Collectives fed by other collectives' results, in a Session graph."""
    graph = tf.Graph()
    with graph.as_default():
        firsts = [build(i) for i in range(COUNT)]
        seconds = [hvd.allreduce(tf.reduce_sum(f), op=hvd.Sum, name=f"graph_chain_{i}")
                   for i, f in enumerate(firsts)]
        results = session_run(seconds + firsts, graph)
    check_all(results[COUNT:])
    for i, out in enumerate(results[:COUNT]):
        assert float(out) == float(np.sum(expected(i))) * size(), f"chain {i}"


def test_session_graph_subset_fetches() -> None:
    """Fetching only some collectives of a graph, then all of them, gives the right values."""
    graph = tf.Graph()
    with graph.as_default():
        outs = [build(i) for i in range(COUNT)]
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            last = session_run(outs[-1], graph, sess)
            np.testing.assert_array_equal(last, expected(COUNT - 1))
            odd = session_run(outs[1::2], graph, sess)
            for i, out in zip(range(1, COUNT, 2), odd):
                np.testing.assert_array_equal(out, expected(i))
            check_all(session_run(outs, graph, sess))


def test_session_graph_grown_between_runs() -> None:
    """Collectives added one at a time, each run fetching all of them so far (the pattern of
    tests that evaluate inside their loop)."""
    graph = tf.Graph()
    with graph.as_default():
        outs: list = []
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            for i in range(COUNT // 2):
                outs.append(build(i))
                results = session_run(outs, graph, sess)
                for k, out in enumerate(results):
                    np.testing.assert_array_equal(out, expected(k), err_msg=f"{i}: {k}")


def test_session_graph_fetched_one_by_one_reruns_earlier_collectives(monkeypatch: Any) -> None:
    """Each collective fetched in its own run also runs every collective created before it
    (each wait depends on every earlier submit): n runs cost n(n+1)/2 collectives, whose
    unclaimed results are dropped, and every fetched value is right. The cost docs/frameworks/tensorflow.md states
    for this pattern."""
    from hora.common import ops as engine_ops

    calls = [0]
    enqueue = engine_ops.enqueue

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return enqueue(*args, **kwargs)

    monkeypatch.setattr(engine_ops, "enqueue", counted)
    n = 8
    graph = tf.Graph()
    with graph.as_default():
        outs = [build(i) for i in range(n)]
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            for i, out in enumerate(outs):
                np.testing.assert_array_equal(session_run(out, graph, sess), expected(i))
    assert calls[0] == n * (n + 1) // 2


def test_shutdown_drops_unclaimed_results() -> None:
    """A Session step that runs an earlier collective without fetching it leaves that result
    unclaimed until the node runs again; shutdown drops it, so that neither its memory nor the
    ended job's shared arena is kept for as long as the process lives (Spark and Ray run job
    after job in one process)."""
    from hora.common import shared_arrays
    from hora.tensorflow import _submit_wait

    arena = shared_arrays.enabled()
    graph = tf.Graph()
    with graph.as_default():
        outs = [build(i) for i in range(2)]
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            np.testing.assert_array_equal(session_run(outs[1], graph, sess), expected(1))
    assert _submit_wait._pending  # collective 0 ran, unfetched
    hvd.shutdown()
    try:
        assert not _submit_wait._pending
        if arena:
            assert not hora_mappings()
    finally:
        hvd.init()


@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_graph_built_again_waits_for_an_unclaimed_collective_of_its_names(kind: str) -> None:
    """A step leaves a collective unclaimed while rank 1 has not submitted it yet (its input
    takes a second there), so the other ranks end the step with it in flight; the same graph,
    built again at once, submits that name again. Its submit waits for the unclaimed collective
    first, where the engine would refuse a name still in flight."""

    def late_on_rank_1(x: np.ndarray) -> np.ndarray:
        if rank() == 1:
            time.sleep(1.0)
        return x

    # allgather: the rows of value(r, 0) of every rank; alltoall: row j of every rank's
    # (rank, rank) rows to rank j, so each rank receives (r, r) from every rank r.
    sent = value(rank(), 0) if kind == "allgather" else np.full([size(), 2], rank(), np.float32)
    want = (expected(0) if kind == "allgather"
            else np.repeat(np.arange(size(), dtype=np.float32)[:, None], 2, axis=1))

    def held_graph() -> tuple[tf.Graph, Any, Any]:
        graph = tf.Graph()
        with graph.as_default():
            late = tf.numpy_function(late_on_rank_1, [tf.constant(sent)], tf.float32,
                                     stateful=True)
            held = getattr(hvd, kind)(late, name=f"graph_held_{kind}")
            summed = hvd.allreduce(tf.constant(value(rank(), 1))[:1], op=hvd.Sum,
                                   name=f"graph_held_sum_{kind}")
        return graph, held, summed

    graph, _, summed = held_graph()
    with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
        np.testing.assert_array_equal(session_run(summed, graph, sess), expected(1))
    graph, held, _ = held_graph()
    with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
        np.testing.assert_array_equal(session_run(held, graph, sess), want)


def test_session_graph_differently_fed_collectives() -> None:
    """A collective reading a placeholder runs without the feeds of collectives created before
    it that read other placeholders (training and evaluation fed differently). Collectives
    fetched together here are ordered: the fed ones come after those that read no feed."""
    graph = tf.Graph()
    with graph.as_default():
        train_in = tf.compat.v1.placeholder(tf.float32, [2])
        eval_in = tf.compat.v1.placeholder(tf.float32, [2])
        plain = [build(i) for i in range(8)]
        train = [hvd.allreduce(train_in * i, op=hvd.Sum, name=f"graph_train_{i}")
                 for i in range(8)]
        evaluation = hvd.allreduce(eval_in, op=hvd.Sum, name="graph_eval")
        later = [build(i + 8) for i in range(8)]
        ones = np.ones(2, np.float32)
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            out = session_run(evaluation, graph, sess, {eval_in: ones})
            np.testing.assert_array_equal(out, np.full(2, float(size()), np.float32))
            results = session_run(later, graph, sess)
            for i, out in enumerate(results):
                np.testing.assert_array_equal(out, expected(i + 8))
            results = session_run(train + plain, graph, sess, {train_in: ones})
            for i, out in enumerate(results[:8]):
                np.testing.assert_array_equal(out, np.full(2, float(size() * i), np.float32))
            for i, out in enumerate(results[8:]):
                np.testing.assert_array_equal(out, expected(i))


def test_function_many_independent_collectives() -> None:
    """The same 64 collectives inside one tf.function, called twice."""

    @tf.function(autograph=False)
    def fn() -> list:
        return [build(i) for i in range(COUNT)]

    for _ in range(2):
        check_all(bounded(fn))


def test_function_gradients_of_many_collectives() -> None:
    """Gradients through many independent allreduces inside a tf.function (the gradient of a
    Sum-allreduce of x is the Sum-allreduce of the output gradient)."""
    xs = [tf.Variable(np.full([3], float(rank() + i), np.float32)) for i in range(16)]

    @tf.function(autograph=False)
    def fn() -> list:
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(hvd.allreduce(x, op=hvd.Sum, name=f"graph_grad_{i}"))
                             for i, x in enumerate(xs)])
        return tape.gradient(loss, xs)

    for grad in bounded(fn):
        np.testing.assert_array_equal(np.asarray(grad), np.full([3], float(size()), np.float32))


def test_graph_collectives_name_the_lines_that_built_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collective in a tf.function runs on TensorFlow's executor, with no line of the user's on
    the stack: the call site that stall and deadlock reports name is the line that built it
    (submit nodes and nodes that submit and wait in one piece alike), and for its gradient the
    line that asked for the gradient."""
    from hora import _core
    from hora.common import ops

    sites: dict[str, str] = {}
    submit = ops._core.submit

    def recording(*args: Any, **request: Any) -> Any:
        # By the first tensor's name.
        sites[args[2][0]] = _core.call_site(request.get("hora_frames", 0) + 1)
        return submit(*args, **request)

    monkeypatch.setattr(ops._core, "submit", recording)
    x = tf.Variable(np.full([3], float(rank()), np.float32))

    lines: dict[str, int] = {}  # filled while the function is traced

    @tf.function(autograph=False)
    def fn() -> tf.Tensor:
        with tf.GradientTape() as tape:
            y = hvd.allreduce(x, op=hvd.Sum, name="graph_site")
            lines["built"] = sys._getframe().f_lineno - 1
        grad = tape.gradient(y, x)
        lines["asked"] = sys._getframe().f_lineno - 1
        with tf.control_dependencies([grad]):
            done = hvd.barrier()  # a node that submits and waits in one piece
            lines["barrier"] = sys._getframe().f_lineno - 1
        return grad, done

    grad, _ = bounded(fn)
    np.testing.assert_array_equal(grad, np.full([3], float(size()), np.float32))
    here = os.path.basename(__file__)
    assert sites.pop("graph_site") == f"{here}:{lines['built']}"
    assert sites.pop("barrier.noname") == f"{here}:{lines['barrier']}"
    assert list(sites.values()) == [f"{here}:{lines['asked']}"], sites


def test_private_pool_reuses_only_free_buffers() -> None:
    """A node's private copies are reused on its next run only when nothing else refers to
    them or to their memory (a result still held, or a view of it, forces a fresh buffer)."""
    from hora.tensorflow._host import ALIGNMENT, PrivatePool

    pool = PrivatePool()
    source = np.arange(1000, dtype=np.float32)
    first = pool.copies([source])[0]
    first_id = id(first)
    np.testing.assert_array_equal(first, source)
    assert first.__array_interface__["data"][0] % ALIGNMENT == 0
    del first
    again = pool.copies([source + 1])[0]
    assert id(again) == first_id  # nothing held it: reused
    held = pool.copies([source + 2])[0]
    assert held is not again  # ``again`` is still held
    np.testing.assert_array_equal(again, source + 1)
    tail = held[10:]  # a view keeps the memory in use, though ``held`` itself goes
    del held, again
    pool.copies([source + 3])
    pool.copies([source + 4])
    np.testing.assert_array_equal(tail, (source + 2)[10:])
    other = pool.copies([np.zeros(3, np.int64)])[0]  # another shape or dtype: its own buffer
    np.testing.assert_array_equal(other, np.zeros(3, np.int64))


def test_private_copies_are_one_block_of_the_shared_arena() -> None:
    """Every rank on this host: a node's private copies lie in the shared arena, back to back
    (64-byte multiples), so the other ranks read the fused allreduce of them in place. A job of
    one rank has no arena: its copies are plain memory."""
    from hora import _core
    from hora.tensorflow._host import PrivatePool

    copies = PrivatePool().copies([np.zeros(1024, np.float32), np.ones(16, np.float32)])
    if size() == 1:
        # One rank has no peers to share memory with: no arena, and plain private copies.
        assert _core.shared_pool_info() is None
        assert not any(_core.in_shared_pool(c.ctypes.data, c.nbytes) for c in copies)
        return
    assert _core.shared_pool_info() is not None
    assert all(_core.in_shared_pool(c.ctypes.data, c.nbytes) for c in copies)
    assert copies[1].ctypes.data == copies[0].ctypes.data + copies[0].nbytes
    del copies

    xs = [tf.Variable(np.full([256, 64], float(rank() + k), np.float32)) for k in range(3)]

    @tf.function(autograph=False)
    def fn() -> list[tf.Tensor]:
        return hvd.grouped_allreduce([x.read_value() for x in xs], op=hvd.Sum,
                                     name="graph_arena")

    before = _core.shared_pool_info()["parts_read_in_place"]
    for _ in range(3):
        outs = bounded(fn)
        for k, out in enumerate(outs):
            want = sum(float(r + k) for r in range(size()))
            np.testing.assert_array_equal(out.numpy(), np.full([256, 64], want, np.float32))
    assert _core.shared_pool_info()["parts_read_in_place"] - before >= 3


def test_function_results_held_across_steps_stay_intact() -> None:
    """Allreduce results of earlier calls of a tf.function (and of a Session), still held,
    keep their values when the same nodes run again."""
    x = tf.Variable(np.zeros([4096], np.float32))

    @tf.function(autograph=False)
    def fn() -> tf.Tensor:
        return hvd.allreduce(x.read_value(), op=hvd.Sum, name="graph_held_results")

    held = []
    for step in range(4):
        x.assign(np.full([4096], float(step + rank()), np.float32))
        held.append(bounded(fn))
    graph = tf.Graph()
    with graph.as_default():
        feed = tf.compat.v1.placeholder(tf.float32, [4096])
        out = hvd.allreduce(feed, op=hvd.Sum, name="graph_held_session")
        with tf.compat.v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            for step in range(4, 8):
                values = {feed: np.full([4096], float(step + rank()), np.float32)}
                held.append(session_run(out, graph, sess, values))
    base = sum(range(size()))
    for step, result in enumerate(held):
        want = np.full([4096], float(step * size() + base), np.float32)
        np.testing.assert_array_equal(np.asarray(result), want, err_msg=f"step {step}")
