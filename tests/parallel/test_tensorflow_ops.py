"""Collectives of hora.tensorflow, eagerly and inside tf.function, checked against NumPy.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_tensorflow_ops.py`` (N = 2..4).
Each rank builds every rank's input from a seed, so the expected result is computed locally.
Every test runs in both modes: "eager" calls the op directly, "function" calls it inside a
freshly traced ``tf.function``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from collections.abc import Callable
from typing import Any

import hora
import hora.tensorflow as hvd
import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    DTYPES,
    FLOAT_DTYPES,
    all_inputs,
    assert_close,
    assert_same,
    check_next_op_works,
    kind_for_op,
    make_input,
    np_dtype,
    rank,
    reduce_ref,
    reducescatter_rows,
    size,
)

MODES = ["eager", "function"]
OPS = {"average": hvd.Average, "sum": hvd.Sum, "min": hvd.Min, "max": hvd.Max,
       "product": hvd.Product}


def run(mode: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` eagerly, or inside a newly traced tf.function."""
    if mode == "eager":
        return fn(*args)
    return tf.function(fn, autograph=False)(*args)


def to_tf(array: np.ndarray) -> tf.Tensor:
    """A tensor with the array's values and dtype (bfloat16 included)."""
    return tf.constant(array)


def to_np(tensor: tf.Tensor) -> np.ndarray:
    """The tensor's values as a NumPy array of the same dtype."""
    return np.asarray(tensor.numpy())


def check(actual: tf.Tensor, expected: np.ndarray, dtype: str, exact: bool = True) -> None:
    """Compare a tensor with the NumPy reference (dtype included)."""
    if exact:
        assert_same(to_np(actual), expected, dtype)
    else:
        assert_close(to_np(actual), expected, dtype)


def py_calls(fn: Callable[..., Any], *args: Any) -> tuple[int, int]:
    """Python-call nodes in the traced graph of ``fn``: (submit nodes, other nodes). A
    collective is one submit node and one wait node; several may share one wait node."""
    graph = tf.function(fn, autograph=False).get_concrete_function(*args).graph
    submits = others = 0
    for op in graph.get_operations():
        if op.type in ("PyFunc", "PyFuncStateless", "EagerPyFunc"):
            if "Submit" in op.name.rsplit("/", 1)[-1]:
                submits += 1
            else:
                others += 1
    return submits, others


# ------------------------------------------------------------------------------------- basics


@pytest.mark.parametrize("mode", MODES)
def test_rank_and_size_ops(mode: str) -> None:
    """size_op, rank_op, local_*_op and process_set_included_op evaluate at run time."""

    def fn() -> list:
        return [hvd.size_op(), hvd.rank_op(), hvd.local_size_op(), hvd.local_rank_op(),
                hvd.process_set_included_op()]

    values = [int(v) for v in run(mode, fn)]
    assert values == [size(), rank(), hvd.local_size(), hvd.local_rank(), 1]
    assert hvd.mpi_ops.allreduce is hvd.allreduce
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


# ---------------------------------------------------------------------------------- allreduce


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_sum(mode: str) -> None:
    """Sum of every dtype (one traced function for all of them); the static shape is kept."""
    inputs = [all_inputs([3, 17], d, "tf_ar_sum") for d in DTYPES]

    def fn(*xs: tf.Tensor) -> list:
        outs = [hvd.allreduce(x, op=hvd.Sum) for x in xs]
        assert all(o.shape == x.shape for o, x in zip(outs, xs))
        return outs

    outs = run(mode, fn, *[to_tf(x[rank()]) for x in inputs])
    for out, xs, dtype in zip(outs, inputs, DTYPES):
        check(out, reduce_ref(xs, "sum", dtype), dtype)


@pytest.mark.parametrize("op", ["average", "min", "max", "product"])
@pytest.mark.parametrize("mode", MODES)
def test_allreduce_ops(mode: str, op: str) -> None:
    """Average (the default), Min, Max and Product on integer and float dtypes."""
    dtypes = ["int32", "uint8", "float32", "float64", "bfloat16"]
    inputs = [all_inputs(101, d, "tf_ar_ops", op, kind=kind_for_op(op)) for d in dtypes]

    def fn(*xs: tf.Tensor) -> list:
        if op == "average":
            return [hvd.allreduce(x) for x in xs]
        return [hvd.allreduce(x, op=OPS[op]) for x in xs]

    outs = run(mode, fn, *[to_tf(x[rank()]) for x in inputs])
    for out, xs, dtype in zip(outs, inputs, dtypes):
        check(out, reduce_ref(xs, op, dtype), dtype, exact=op != "average")


@pytest.mark.parametrize("count", [0, 1, 70001])
@pytest.mark.parametrize("mode", MODES)
def test_allreduce_sizes(mode: str, count: int) -> None:
    """Empty, one element and a large tensor."""
    xs = all_inputs(count, "float32", "tf_ar_sizes")
    out = run(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, name=f"tf_ar_sizes.{count}"),
              to_tf(xs[rank()]))
    check(out, reduce_ref(xs, "sum", "float32"), "float32")


@pytest.mark.parametrize("mode", MODES)
def test_large_tensors_every_path(mode: str) -> None:
    """Tensors above the zero-copy threshold (results shared with TensorFlow through DLPack
    when eager) for dtypes that cross as other types (bfloat16, bool)."""
    dtypes = ["bfloat16", "bool", "int8", "float64"]
    inputs = [all_inputs([20011], d, "tf_large") for d in dtypes]

    def fn(*xs: tf.Tensor) -> list:
        return [hvd.allreduce(x, op=hvd.Sum) for x in xs] + [hvd.allgather(x) for x in xs]

    outs = run(mode, fn, *[to_tf(x[rank()]) for x in inputs])
    for reduced, gathered, xs, dtype in zip(outs[:4], outs[4:], inputs, dtypes):
        check(reduced, reduce_ref(xs, "sum", dtype), dtype)
        check(gathered, np.concatenate(xs), dtype)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_scalar_prescale_postscale(mode: str) -> None:
    """A 0-d tensor, with prescale before and postscale after the reduction."""
    xs = [np.array(r + 1.5, dtype=np.float64) for r in range(size())]
    out = run(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                                            postscale_factor=0.25), to_tf(xs[rank()]))
    assert out.shape == ()
    check(out, reduce_ref(xs, "sum", "float64", 2.0, 0.25), "float64", exact=False)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_deprecated_average(mode: str) -> None:
    """average= still works; combined with op it is a ValueError."""
    xs = all_inputs(9, "float64", "tf_ar_dep")
    with pytest.warns(DeprecationWarning):
        out = run(mode, lambda x: hvd.allreduce(x, average=False), to_tf(xs[rank()]))
    check(out, reduce_ref(xs, "sum", "float64"), "float64", exact=False)
    with pytest.raises(ValueError):
        hvd.allreduce(to_tf(xs[rank()]), average=True, op=hvd.Sum)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_compression_fp16(mode: str) -> None:
    """Compression.fp16 sends float16 and returns the input dtype."""
    xs = all_inputs(33, "float32", "tf_ar_fp16")
    out = run(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16),
              to_tf(xs[rank()]))
    assert out.dtype == tf.float32
    check(out, reduce_ref(xs, "sum", "float32"), "float32", exact=False)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce(mode: str) -> None:
    """A group of mixed dtypes and shapes is one Python call inside a graph."""
    dtypes = ["float32", "int64", "float16", "bool"]
    inputs = [all_inputs([i + 2, 3], d, "tf_gar", i) for i, d in enumerate(dtypes)]

    def fn(*xs: tf.Tensor) -> list:
        return hvd.grouped_allreduce(list(xs), op=hvd.Sum)

    mine = [to_tf(x[rank()]) for x in inputs]
    outs = run(mode, fn, *mine)
    for out, x, d in zip(outs, inputs, dtypes):
        check(out, reduce_ref(x, "sum", d), d)
    assert py_calls(fn, *mine) == (1, 1)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_indexed_slices(mode: str) -> None:
    """IndexedSlices are gathered (values and indices); Average divides the values."""
    values = [make_input(r, [r + 1, 4], "float32", "tf_ar_sparse") for r in range(size())]
    indices = [np.arange(r + 1, dtype=np.int64) * 2 for r in range(size())]

    def fn(v: tf.Tensor, i: tf.Tensor) -> tuple:
        out = hvd.allreduce(tf.IndexedSlices(v, i, dense_shape=tf.constant([64, 4], tf.int64)))
        assert isinstance(out, tf.IndexedSlices)
        return out.values, out.indices

    out_values, out_indices = run(mode, fn, to_tf(values[rank()]), to_tf(indices[rank()]))
    assert_close(to_np(out_values), np.concatenate(values) / size(), "float32")
    assert_same(to_np(out_indices), np.concatenate(indices), "int64")


def test_allreduce_unsupported_dtype() -> None:
    """complex64 is refused before anything is sent."""
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(tf.constant([1 + 2j], dtype=tf.complex64))


# ---------------------------------------------------------------------------------- allgather


@pytest.mark.parametrize("mode", MODES)
def test_allgather(mode: str) -> None:
    """Every dtype; rank r contributes r + 1 rows; dim 0 is unknown statically in a graph."""
    inputs = [[make_input(r, [r + 1, 5], d, "tf_ag", kind="any") for r in range(size())]
              for d in DTYPES]

    def fn(*xs: tf.Tensor) -> list:
        outs = [hvd.allgather(x) for x in xs]
        if mode == "function":
            assert all(o.shape.as_list() == [None, 5] for o in outs)
        return outs

    outs = run(mode, fn, *[to_tf(x[rank()]) for x in inputs])
    for out, xs, dtype in zip(outs, inputs, DTYPES):
        check(out, np.concatenate(xs), dtype)


@pytest.mark.parametrize("mode", MODES)
def test_allgather_empty_rank(mode: str) -> None:
    """A rank may contribute zero rows."""
    xs = [make_input(r, [r, 3], "float64", "tf_ag_empty") for r in range(size())]
    out = run(mode, lambda x: hvd.allgather(x, name="tf_ag_empty"), to_tf(xs[rank()]))
    check(out, np.concatenate(xs), "float64")


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allgather(mode: str) -> None:
    """Several tensors gathered as one group."""
    a = [make_input(r, [r + 2], "int32", "tf_gag_a") for r in range(size())]
    b = [make_input(r, [1, 2, 2], "float32", "tf_gag_b") for r in range(size())]
    outs = run(mode, lambda x, y: hvd.grouped_allgather([x, y]), to_tf(a[rank()]),
               to_tf(b[rank()]))
    check(outs[0], np.concatenate(a), "int32")
    check(outs[1], np.concatenate(b), "float32")


# ---------------------------------------------------------------------------------- broadcast


@pytest.mark.parametrize("mode", MODES)
def test_broadcast(mode: str) -> None:
    """Every dtype; every rank gets the root's value (root = last rank)."""
    root = size() - 1
    inputs = [all_inputs([4, 3], d, "tf_bc", kind="any") for d in DTYPES]

    def fn(*xs: tf.Tensor) -> list:
        outs = [hvd.broadcast(x, root) for x in xs]
        assert all(o.shape == x.shape for o, x in zip(outs, xs))
        return outs

    outs = run(mode, fn, *[to_tf(x[rank()]) for x in inputs])
    for out, xs, dtype in zip(outs, inputs, DTYPES):
        check(out, xs[root], dtype)


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_inplace_variables(mode: str) -> None:
    """broadcast_ and broadcast_variables overwrite tf.Variables and Keras variables."""
    import keras

    xs = all_inputs([6], "float32", "tf_bc_var")
    ys = all_inputs([2, 2], "int64", "tf_bc_var")
    v = tf.Variable(xs[rank()])
    k = keras.Variable(ys[rank()])
    w = tf.Variable(xs[rank()] * 2)

    def fn() -> int:
        hvd.broadcast_([v, k], root_rank=0)
        hvd.broadcast_variables([w], root_rank=size() - 1)
        return 0

    run(mode, fn)
    check(v.read_value(), xs[0], "float32")
    check(tf.convert_to_tensor(k), ys[0], "int64")
    check(w.read_value(), xs[size() - 1] * 2, "float32")


def test_broadcast_invalid_root() -> None:
    """A root outside the job is a ValueError on every rank."""
    with pytest.raises(ValueError, match="invalid root rank"):
        hvd.broadcast(tf.zeros([2]), size())


# ----------------------------------------------------------------------------------- alltoall


def _splits_for(r: int) -> list[int]:
    """Rows rank r sends to each rank: (r + j) % 3 to rank j."""
    return [(r + j) % 3 for j in range(size())]


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_splits(mode: str) -> None:
    """Uneven splits (some zero); received_splits tells how many rows came from each rank."""
    dtypes = ["uint8", "int32", "float32", "bfloat16", "bool"]
    inputs = [[make_input(r, [sum(_splits_for(r)), 2], d, "tf_a2a", kind="any")
               for r in range(size())] for d in dtypes]

    def fn(s: tf.Tensor, *xs: tf.Tensor) -> list:
        return [hvd.alltoall(x, splits=s) for x in xs]

    outs = run(mode, fn, tf.constant(_splits_for(rank()), dtype=tf.int32),
               *[to_tf(x[rank()]) for x in inputs])
    for (out, received), xs, dtype in zip(outs, inputs, dtypes):
        pieces, expected_splits = [], []
        for r in range(size()):
            splits = _splits_for(r)
            start = sum(splits[:rank()])
            pieces.append(xs[r][start:start + splits[rank()]])
            expected_splits.append(splits[rank()])
        check(out, np.concatenate(pieces), dtype)
        assert to_np(received).tolist() == expected_splits


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_equal_split(mode: str) -> None:
    """Without splits dim 0 is divided equally and only the output is returned."""
    xs = all_inputs([2 * size(), 3], "float64", "tf_a2a_eq")
    out = run(mode, lambda x: hvd.alltoall(x), to_tf(xs[rank()]))
    expected = np.concatenate([x[2 * rank():2 * rank() + 2] for x in xs])
    check(out, expected, "float64")


def test_alltoall_splits_error() -> None:
    """Wrong number of splits is a ValueError raised where the call is made; rows that do not
    divide evenly without splits are TensorFlow's InvalidArgumentError (Horovod's class)."""
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(tf.zeros([4]), splits=[1] * (size() + 1))
    if size() > 1:
        with pytest.raises(tf.errors.InvalidArgumentError):
            hvd.alltoall(tf.zeros([size() + 1]))


# ------------------------------------------------------------------------------ reducescatter


@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("mode", MODES)
def test_reducescatter(mode: str, op: str) -> None:
    """Rows of the reduction; the first dim0 % size ranks get one more; static rows known."""
    dim0 = 2 * size() + 1
    dtypes = ["int32", "float16", "float32", "float64"]
    inputs = [all_inputs([dim0, 3], d, "tf_rs", op) for d in dtypes]
    rows = reducescatter_rows(dim0, size())

    def fn(*xs: tf.Tensor) -> list:
        outs = [hvd.reducescatter(x, op=OPS[op]) for x in xs]
        assert all(o.shape[0] == rows[rank()] for o in outs)
        return outs

    outs = run(mode, fn, *[to_tf(x[rank()]) for x in inputs])
    start = sum(rows[:rank()])
    for out, xs, dtype in zip(outs, inputs, dtypes):
        expected = reduce_ref(xs, op, dtype)[start:start + rows[rank()]]
        check(out, expected, dtype, exact=op == "sum")


@pytest.mark.parametrize("mode", MODES)
def test_grouped_reducescatter(mode: str) -> None:
    """Two tensors scattered as one group."""
    a = all_inputs([size() * 2, 2], "float32", "tf_grs_a")
    b = all_inputs([size()], "int64", "tf_grs_b")
    outs = run(mode, lambda x, y: hvd.grouped_reducescatter([x, y], op=hvd.Sum),
               to_tf(a[rank()]), to_tf(b[rank()]))
    check(outs[0], reduce_ref(a, "sum", "float32")[2 * rank():2 * rank() + 2], "float32")
    check(outs[1], reduce_ref(b, "sum", "int64")[rank():rank() + 1], "int64")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_postscale_scales_the_rounded_sum(mode: str, dtype: str) -> None:
    """float16/bfloat16 Sum with a postscale factor, as Horovod computes it: the sum is rounded
    into the type, then multiplied by the factor in float32 (so sum(x) * f equals (n * x) * f
    when every rank holds x). Allreduce and grouped reducescatter; values whose float32 sums are
    exact (at most 11 significant bits, below 128), different on every rank."""
    dt = np_dtype(dtype)
    factor = 0.7
    rng = np.random.default_rng(41)
    xs = [rng.uniform(1.0, 100.0, size=(4 * size(), 3)).astype(np.float32).astype(dt)
          for _ in range(size())]
    rounded = sum(x.astype(np.float64) for x in xs).astype(dt).astype(np.float32)
    want = (rounded * np.float32(factor)).astype(dt)

    def fn(x: tf.Tensor) -> list:
        return [hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor),
                *hvd.grouped_reducescatter([x, x], op=hvd.Sum, postscale_factor=factor)]

    outs = run(mode, fn, to_tf(xs[rank()]))
    check(outs[0], want, dtype)
    for out in outs[1:]:
        check(out, want[4 * rank():4 * rank() + 4], dtype)


# ---------------------------------------------------------------------- join, barrier, names


@pytest.mark.parametrize("mode", MODES)
def test_join_and_barrier(mode: str) -> None:
    """join() returns the same last rank everywhere; barrier() completes."""
    last = int(run(mode, hvd.join))
    assert 0 <= last < size()
    gathered = hora.allgather(np.array([last], dtype=np.int32), name=f"tf_join_check.{mode}")
    assert len(set(gathered.tolist())) == 1
    assert int(run(mode, hvd.barrier)) == 0


def test_graph_names_are_stable_and_unique() -> None:
    """Inside a tf.function, unnamed ops get names derived from their inputs, made unique per
    function; running the function twice reuses them (the response cache then hits)."""
    xs = all_inputs(8, "float32", "tf_names")

    @tf.function(autograph=False)
    def fn(x: tf.Tensor) -> tf.Tensor:
        return hvd.allreduce(x, op=hvd.Sum) + hvd.allreduce(x, op=hvd.Max)

    expected = reduce_ref(xs, "sum", "float32") + reduce_ref(xs, "max", "float32")
    for _ in range(3):
        check(fn(to_tf(xs[rank()])), expected, "float32", exact=False)


# ---------------------------------------------------------------------------------- gradients


def _weights(r: int, shape: list[int], *key: object) -> np.ndarray:
    return make_input(r, shape, "float64", "tf_grad_w", *key)


@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("mode", MODES)
def test_allreduce_grad(mode: str, op: str) -> None:
    """d/dx of sum(w_r * allreduce(x)) is the allreduce (same op) of the w_r."""
    x = tf.constant(make_input(rank(), [5], "float64", "tf_grad_ar"))
    ws = [_weights(r, [5], "ar") for r in range(size())]

    def fn(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(hvd.allreduce(x, op=OPS[op]) * ws[rank()])
        return tape.gradient(loss, x)

    check(run(mode, fn, x), reduce_ref(ws, op, "float64"), "float64", exact=False)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_grad(mode: str) -> None:
    """Each input of a grouped allreduce gets the reduction of its output's gradient."""
    a = tf.constant(make_input(rank(), [3], "float64", "tf_grad_gar_a"))
    b = tf.constant(make_input(rank(), [2, 2], "float64", "tf_grad_gar_b"))
    wa = [_weights(r, [3], "gar_a") for r in range(size())]
    wb = [_weights(r, [2, 2], "gar_b") for r in range(size())]

    def fn(a: tf.Tensor, b: tf.Tensor) -> list:
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
            loss = tf.reduce_sum(ya * wa[rank()]) + tf.reduce_sum(yb * wb[rank()])
        return tape.gradient(loss, [a, b])

    ga, gb = run(mode, fn, a, b)
    check(ga, reduce_ref(wa, "sum", "float64"), "float64", exact=False)
    check(gb, reduce_ref(wb, "sum", "float64"), "float64", exact=False)


@pytest.mark.parametrize("mode", MODES)
def test_allgather_grad(mode: str) -> None:
    """This rank's rows of the averaged output gradient."""
    rows = [r + 1 for r in range(size())]
    total = sum(rows)
    x = tf.constant(make_input(rank(), [rows[rank()], 2], "float64", "tf_grad_ag"))
    ws = [_weights(r, [total, 2], "ag") for r in range(size())]

    def fn(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(hvd.allgather(x) * ws[rank()])
        return tape.gradient(loss, x)

    start = sum(rows[:rank()])
    expected = reduce_ref(ws, "average", "float64")[start:start + rows[rank()]]
    check(run(mode, fn, x), expected, "float64", exact=False)


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_grad(mode: str) -> None:
    """The averaged output gradient on the root, zero elsewhere."""
    x = tf.constant(make_input(rank(), [4], "float64", "tf_grad_bc"))
    ws = [_weights(r, [4], "bc") for r in range(size())]

    def fn(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(hvd.broadcast(x, 0) * ws[rank()])
        return tape.gradient(loss, x)

    expected = reduce_ref(ws, "average", "float64") if rank() == 0 else np.zeros(4)
    check(run(mode, fn, x), expected, "float64", exact=False)


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_grad(mode: str) -> None:
    """Rows sent to rank k receive gradient k + 1; unsent trailing rows receive zero."""
    splits = _splits_for(rank())
    x = tf.constant(make_input(rank(), [sum(splits) + 1, 2], "float64", "tf_grad_a2a"))

    def fn(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            out, _ = hvd.alltoall(x, splits=tf.constant(splits, tf.int32))
            loss = tf.reduce_sum(out) * float(rank() + 1)
        return tape.gradient(loss, x)

    expected = np.concatenate([np.full([n, 2], k + 1.0) for k, n in enumerate(splits)]
                              + [np.zeros([1, 2])])
    check(run(mode, fn, x), expected, "float64", exact=False)


@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("mode", MODES)
def test_reducescatter_grad(mode: str, op: str) -> None:
    """The allgathered output gradient, times the set size for Sum (Horovod's rule)."""
    dim0 = size() + 1
    x = tf.constant(make_input(rank(), [dim0, 2], "float64", "tf_grad_rs"))

    def fn(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(hvd.reducescatter(x, op=OPS[op])) * float(rank() + 1)
        return tape.gradient(loss, x)

    rows = reducescatter_rows(dim0, size())
    factor = float(size()) if op == "sum" else 1.0
    expected = np.concatenate([np.full([n, 2], (k + 1.0) * factor) for k, n in enumerate(rows)])
    check(run(mode, fn, x), expected, "float64", exact=False)


# --------------------------------------------------------------------- DistributedGradientTape


@pytest.mark.parametrize("mode", MODES)
def test_distributed_gradient_tape(mode: str) -> None:
    """Gradients of a small model are the average of every rank's local gradients, computed
    with ONE Python call for all gradients inside a graph; None gradients stay None."""
    kernel = tf.Variable(make_input(0, [4, 3], "float32", "tf_tape_k"))
    bias = tf.Variable(np.zeros(3, np.float32))
    unused = tf.Variable(np.ones(2, np.float32))
    data = [make_input(r, [6, 4], "float32", "tf_tape_x") for r in range(size())]

    def local_grads(x: np.ndarray) -> list[np.ndarray]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(x, kernel) + bias))
        return [g.numpy() for g in tape.gradient(loss, [kernel, bias])]

    per_rank = [local_grads(x) for x in data]

    def fn(x: tf.Tensor) -> list:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(x, kernel) + bias))
        tape = hvd.DistributedGradientTape(tape)
        assert isinstance(tape, tf.GradientTape)
        grads = tape.gradient(loss, [kernel, bias, unused])
        assert grads[2] is None
        return grads[:2]

    grads = run(mode, fn, tf.constant(data[rank()]))
    for i in range(2):
        expected = np.mean([g[i] for g in per_rank], axis=0)
        assert_close(to_np(grads[i]), expected, "float32", rtol=1e-5, atol=1e-5)
    if mode == "function":
        # One submit per gradient (each starts when its gradient exists), one wait for all.
        assert py_calls(fn, tf.constant(data[rank()])) == ((2, 1) if size() > 1 else (0, 0))


@pytest.mark.parametrize("mode", MODES)
def test_distributed_gradient_tape_wrapping_before_recording(mode: str) -> None:
    """The tape may be wrapped before it records; a persistent tape reduces on every call."""
    var = tf.Variable(np.ones([3], np.float32))
    x = tf.constant(float(rank() + 1))

    def fn(x: tf.Tensor) -> list:
        with hvd.DistributedGradientTape(tf.GradientTape(persistent=True)) as tape:
            loss = tf.reduce_sum(var * x)
            double = loss * 2.0
        return [tape.gradient(loss, var), tape.gradient(double, var)]

    first, second = run(mode, fn, x)
    mean = np.mean([r + 1.0 for r in range(size())])
    assert_close(to_np(first), np.full([3], mean, np.float32), "float32")
    assert_close(to_np(second), np.full([3], 2 * mean, np.float32), "float32")


def test_distributed_gradient_tape_groups_and_predivide() -> None:
    """num_groups > 1 and a predivide factor give the same average (one submit per group, one wait)."""
    variables = [tf.Variable(np.full([3], i + 1.0, np.float32)) for i in range(4)]
    x = tf.constant(float(rank() + 1))

    @tf.function(autograph=False)
    def fn(x: tf.Tensor) -> list:
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v) * x for v in variables])
        tape = hvd.DistributedGradientTape(tape, num_groups=2, gradient_predivide_factor=2.0)
        return tape.gradient(loss, variables)

    mean = np.mean([r + 1.0 for r in range(size())])
    for g in fn(x):
        assert_close(to_np(g), np.full([3], mean, np.float32), "float32")
    assert py_calls(fn.python_function, x) == ((2, 1) if size() > 1 else (0, 0))
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, gradient_predivide_factor=2.0)


def test_partial_distributed_gradient_tape() -> None:
    """Local sources keep their local gradient (scaled by 1/size)."""
    shared = tf.Variable(np.ones([2], np.float32))
    local = tf.Variable(np.ones([2], np.float32))
    x = tf.constant(float(rank() + 1))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared * x) + tf.reduce_sum(local * x)
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    g_shared, g_local = tape.gradient(loss, [shared, local])
    mean = np.mean([r + 1.0 for r in range(size())])
    assert_close(to_np(g_shared), np.full([2], mean, np.float32), "float32")
    assert_close(to_np(g_local), np.full([2], (rank() + 1.0) / size(), np.float32), "float32")


# -------------------------------------------------------------------------------- process sets


def test_process_set_allreduce() -> None:
    """Allreduce within a dynamic process set of the even ranks, in both modes."""
    if size() == 1:
        pytest.skip("needs two ranks (skipped on every rank)")
    evens = list(range(0, size(), 2))
    ps = hvd.add_process_set(evens)
    try:
        xs = [make_input(r, [6], "float64", "tf_ps") for r in evens]
        if rank() in evens:
            x = to_tf(xs[evens.index(rank())])
            for mode in MODES:
                out = run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=ps), x)
                check(out, reduce_ref(xs, "sum", "float64"), "float64", exact=False)
            included = int(hvd.process_set_included_op(ps.process_set_id))
            assert included == 1
        else:
            with pytest.raises(ValueError, match="not a member"):
                hvd.allreduce(tf.zeros([6], tf.float64), process_set=ps)
    finally:
        hvd.remove_process_set(ps)


@pytest.mark.parametrize("mode", MODES)
def test_gradients_outside_the_process_set_pass_unchanged(mode: str) -> None:
    """A DistributedGradientTape over the even ranks reduces their gradients; on the other ranks
    (and in a set of one rank) the gradients pass unchanged, as Horovod leaves them. Local
    sources are divided by the set's size on every rank, members or not, as in Horovod."""
    evens = list(range(0, size(), 2))
    # At one rank the global set is the set of one rank (a set equal to it cannot be added).
    ps = hvd.add_process_set(evens) if size() > 1 else hvd.global_process_set
    try:
        shared = tf.Variable(np.ones([3], np.float32))
        local = tf.Variable(np.ones([3], np.float32))

        def grads(x: tf.Tensor) -> list:
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(shared * x) + tf.reduce_sum(local * x)
            tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local], process_set=ps)
            return tape.gradient(loss, [shared, local])

        mine = float(rank() + 1)
        g_shared, g_local = run(mode, grads, tf.constant(mine))
        reduced = rank() in evens and len(evens) > 1
        expected = np.mean([r + 1.0 for r in evens]) if reduced else mine
        assert_close(to_np(g_shared), np.full([3], expected, np.float32), "float32")
        assert_close(to_np(g_local), np.full([3], mine / len(evens), np.float32), "float32")
    finally:
        if ps is not hvd.global_process_set:
            hvd.remove_process_set(ps)


# -------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("mode", MODES)
def test_shape_mismatch_raises_everywhere(mode: str) -> None:
    """Different shapes under one name fail on every rank (a TensorFlow op error carrying
    Hora's message inside a graph) and the job stays usable."""
    if size() == 1:
        pytest.skip("needs two ranks (skipped on every rank)")
    x = tf.zeros([3 + rank()])
    errors = (hvd.HoraError,) if mode == "eager" else (tf.errors.OpError, hvd.HoraError)
    with pytest.raises(errors) as info:
        run(mode, lambda t: hvd.allreduce(t, name=f"tf_err_shape.{mode}"), x)
    assert "Mismatched ALLREDUCE tensor shapes" in str(info.value)
    # Horovod's error class eagerly; inside a graph a Python node can only end in UnknownError.
    expected_class = (tf.errors.FailedPreconditionError if mode == "eager"
                      else tf.errors.UnknownError)
    assert isinstance(info.value, expected_class)
    check_next_op_works(f"tf_err_shape.{mode}")


def test_dtype_mismatch_raises_everywhere() -> None:
    """Different dtypes under one name fail on every rank, naming both types."""
    if size() == 1:
        pytest.skip("needs two ranks (skipped on every rank)")
    x = tf.zeros([5], tf.float32 if rank() == 0 else tf.int32)
    with pytest.raises(hvd.HoraError) as info:
        hvd.allreduce(x, name="tf_err_dtype")
    message = str(info.value)
    assert "Mismatched data types" in message and "float32" in message and "int32" in message
    check_next_op_works("tf_err_dtype")


def test_allgather_rank_mismatch_raises_everywhere() -> None:
    """Allgather with a different number of dimensions fails on every rank."""
    if size() == 1:
        pytest.skip("needs two ranks (skipped on every rank)")
    x = tf.zeros([2] * (1 + rank() % 2))
    with pytest.raises(hvd.HoraError):
        hvd.allgather(x, name="tf_err_ag")
    check_next_op_works("tf_err_ag")


# ----------------------------------------------------------------------- objects and variables


def test_broadcast_and_allgather_object() -> None:
    """Picklable objects from the root, and from every rank."""
    obj = {"rank": rank(), "payload": list(range(rank() + 2))}
    assert hvd.broadcast_object(obj, root_rank=0) == {"rank": 0, "payload": [0, 1]}
    fn = hvd.broadcast_object_fn(root_rank=size() - 1)
    assert fn(obj)["rank"] == size() - 1
    gathered = hvd.allgather_object(obj)
    assert [o["rank"] for o in gathered] == list(range(size()))


def test_broadcast_global_variables_eager_error() -> None:
    """TensorFlow 2 has no global variables: a clear RuntimeError."""
    with pytest.raises(RuntimeError, match="broadcast_variables"):
        hvd.broadcast_global_variables(0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_allreduce_float_dtypes_in_function_exact(dtype: str) -> None:
    """Sum of values that need no rounding is exact for every float dtype inside a graph."""
    xs = all_inputs(31, dtype, "tf_ar_float_exact")
    out = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum), autograph=False)(to_tf(xs[rank()]))
    assert out.dtype.as_numpy_dtype == np_dtype(dtype)
    check(out, reduce_ref(xs, "sum", dtype), dtype)


def test_horovod_helpers() -> None:
    """Helpers Horovod scripts call on hora.tensorflow: no GPU collectives, the mode test."""
    assert hvd.gpu_available("tensorflow") is False
    assert hvd._executing_eagerly() is True
    assert not tf.function(lambda: tf.constant(hvd._executing_eagerly()))().numpy()
