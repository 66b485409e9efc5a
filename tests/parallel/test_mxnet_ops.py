"""hora.mxnet collectives on NDArrays, checked against NumPy on every rank.

Run under ``horarun -np N`` (2 to 4 ranks) with a Python that has MXNet 1.9.1 (see
tests/README or /work/shared/reference/environment.md). Every rank computes every rank's input from
a seed, so each rank can check the result of a collective locally. Skips are decided the same way
on every rank.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")

import hora
import numpy as np
import pytest
from conftest import (
    all_inputs,
    assert_close,
    assert_same,
    kind_for_op,
    rank,
    reduce_ref,
    reducescatter_rows,
    size,
)

hvd = pytest.importorskip("hora.mxnet", exc_type=ImportError)
mx = pytest.importorskip("mxnet")

# The dtypes MXNet NDArrays can hold that Hora reduces (bool goes through a NumPy copy).
MX_DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
MX_OPS = {"average": hvd.Average, "sum": hvd.Sum, "min": hvd.Min, "max": hvd.Max,
          "product": hvd.Product}
SHAPES = [(17,), (3, 5), (2, 3, 4)]


def nd(x: np.ndarray) -> mx.nd.NDArray:
    """An NDArray copy of ``x`` with its dtype."""
    return mx.nd.array(x, dtype=x.dtype)


def pending(x: np.ndarray) -> mx.nd.NDArray:
    """An NDArray equal to ``x`` that MXNet's engine is still computing when it is returned.

    The value comes out of a chain of queued operators, so reading it before the engine has run
    them would give wrong values; collectives must wait for it.
    """
    base = mx.nd.array(x, dtype=x.dtype)
    heavy = mx.nd.ones((384, 384), dtype="float32")
    for _ in range(6):
        heavy = mx.nd.dot(heavy, heavy) / 384.0
    zero = (heavy.sum() * 0).astype(x.dtype)
    return mx.nd.broadcast_add(base, zero.reshape((1,) * base.ndim))


def require_ranks(n: int) -> None:
    """Skip on every rank alike when the job has fewer than ``n`` ranks."""
    if size() < n:
        pytest.skip(f"needs at least {n} ranks")


# ------------------------------------------------------------------------------------ allreduce


@pytest.mark.parametrize("dtype", MX_DTYPES)
@pytest.mark.parametrize("op", list(MX_OPS))
def test_allreduce(dtype: str, op: str) -> None:
    xs = all_inputs((4, 5), dtype, "mx.allreduce", op, kind=kind_for_op(op))
    x = nd(xs[rank()])
    out = hvd.allreduce(x, op=MX_OPS[op], name=f"mx.ar.{op}.{dtype}")
    assert isinstance(out, mx.nd.NDArray) and out is not x
    assert_same(out.asnumpy(), reduce_ref(xs, op, dtype), dtype)
    assert_same(x.asnumpy(), xs[rank()], dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_allreduce_dims_default_average(shape: tuple[int, ...]) -> None:
    xs = all_inputs(shape, "float32", "mx.ar.dims")
    out = hvd.allreduce(nd(xs[rank()]), name=f"mx.ar.dims.{len(shape)}")
    assert out.shape == shape
    assert_same(out.asnumpy(), reduce_ref(xs, "average", "float32"), "float32")


@pytest.mark.parametrize("dtype", ["int32", "float16", "float64"])
def test_allreduce_in_place(dtype: str) -> None:
    xs = all_inputs(33, dtype, "mx.ar_")
    x = nd(xs[rank()])
    assert hvd.allreduce_(x, op=hvd.Sum, name=f"mx.ar_.{dtype}") is x
    assert_same(x.asnumpy(), reduce_ref(xs, "sum", dtype), dtype)


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
@pytest.mark.parametrize(("pre", "post"), [(0.5, 1.0), (1.0, 2.0), (2.0, 0.25)])
def test_allreduce_scale_factors(dtype: str, pre: float, post: float) -> None:
    xs = all_inputs(19, dtype, "mx.ar.scale", pre, post)
    out = hvd.allreduce(nd(xs[rank()]), op=hvd.Sum, prescale_factor=pre, postscale_factor=post,
                        name=f"mx.ar.scale.{dtype}.{pre}.{post}")
    assert_close(out.asnumpy(), reduce_ref(xs, "sum", dtype, pre, post), dtype)


def test_allreduce_average_argument() -> None:
    xs = all_inputs(6, "float32", "mx.ar.avg")
    with pytest.warns(DeprecationWarning):
        out = hvd.allreduce(nd(xs[rank()]), average=False, name="mx.ar.avg")
    assert_same(out.asnumpy(), reduce_ref(xs, "sum", "float32"), "float32")
    with pytest.raises(ValueError):
        hvd.allreduce(nd(xs[rank()]), average=True, op=hvd.Sum, name="mx.ar.avg2")


def test_allreduce_bool() -> None:
    xs = all_inputs(21, "bool", "mx.ar.bool", kind="any")
    out = hvd.allreduce(nd(xs[rank()]), op=hvd.Max, name="mx.ar.bool")
    assert_same(out.asnumpy(), reduce_ref(xs, "max", "bool"), "bool")
    x = nd(xs[rank()])
    hvd.allreduce_(x, op=hvd.Min, name="mx.ar_.bool")
    assert_same(x.asnumpy(), reduce_ref(xs, "min", "bool"), "bool")


def test_allreduce_waits_for_pending_input_and_output() -> None:
    """The input is still being computed by MXNet when it is passed; the in-place result is read
    by an MXNet operator right after the call."""
    xs = all_inputs((8, 8), "float32", "mx.ar.pending")
    x = pending(xs[rank()])
    out = hvd.allreduce(x, op=hvd.Sum, name="mx.ar.pending")
    assert_same(out.asnumpy(), reduce_ref(xs, "sum", "float32"), "float32")
    y = pending(xs[rank()])
    hvd.allreduce_(y, op=hvd.Sum, name="mx.ar_.pending")
    doubled = (y * 2).asnumpy()
    assert_same(doubled, reduce_ref(xs, "sum", "float32") * 2, "float32")


def test_allreduce_larger_than_fusion_buffer() -> None:
    count = 300_001
    xs = all_inputs(count, "float32", "mx.ar.big")
    out = hvd.allreduce(nd(xs[rank()]), op=hvd.Sum, name="mx.ar.big")
    assert_same(out.asnumpy(), reduce_ref(xs, "sum", "float32"), "float32")


def test_grouped_allreduce() -> None:
    dtypes = ["float32", "int64", "float16", "float32"]
    inputs = [all_inputs((i + 2, 3), dt, "mx.gar", i) for i, dt in enumerate(dtypes)]
    tensors = [nd(xs[rank()]) for xs in inputs]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="mx.gar")
    assert len(outs) == len(tensors)
    for out, xs, dt in zip(outs, inputs, dtypes):
        assert_same(out.asnumpy(), reduce_ref(xs, "sum", dt), dt)
    same = hvd.grouped_allreduce_(tensors, name="mx.gar_")
    assert all(a is b for a, b in zip(same, tensors))
    for t, xs, dt in zip(tensors, inputs, dtypes):
        assert_same(t.asnumpy(), reduce_ref(xs, "average", dt), dt)


def test_allreduce_unnamed_calls_in_order() -> None:
    xs = all_inputs(5, "float64", "mx.ar.noname")
    for _ in range(3):
        out = hvd.allreduce(nd(xs[rank()]), op=hvd.Sum)
        assert_same(out.asnumpy(), reduce_ref(xs, "sum", "float64"), "float64")


def test_allreduce_process_set() -> None:
    require_ranks(2)
    members = list(range(1, size()))
    ps = hvd.add_process_set(members)
    try:
        if rank() in members:
            xs = all_inputs(9, "float32", "mx.ar.ps", ranks=members)
            me = members.index(rank())
            out = hvd.allreduce(nd(xs[me]), op=hvd.Sum, name="mx.ar.ps", process_set=ps)
            assert_same(out.asnumpy(), reduce_ref(xs, "sum", "float32"), "float32")
        else:
            with pytest.raises(ValueError):
                hvd.allreduce(mx.nd.ones((3,)), name="mx.ar.ps", process_set=ps)
    finally:
        hvd.remove_process_set(ps)


# ------------------------------------------------------------------------------------ allgather


@pytest.mark.parametrize("dtype", [*MX_DTYPES, "bool"])
def test_allgather_variable_rows(dtype: str) -> None:
    shapes = [(r + 1, 2, 3) for r in range(size())]
    xs = [all_inputs(s, dtype, "mx.ag", kind="any")[r] for r, s in enumerate(shapes)]
    out = hvd.allgather(nd(xs[rank()]), name=f"mx.ag.{dtype}")
    assert_same(out.asnumpy(), np.concatenate(xs), dtype)


def test_allgather_empty_rank() -> None:
    shapes = [(r, 4) for r in range(size())]
    xs = [all_inputs(s, "float32", "mx.ag.empty")[r] for r, s in enumerate(shapes)]
    out = hvd.allgather(nd(xs[rank()]), name="mx.ag.empty")
    assert_same(out.asnumpy(), np.concatenate(xs), "float32")


def test_allgather_pending_input() -> None:
    xs = all_inputs((3, 3), "float32", "mx.ag.pending")
    out = hvd.allgather(pending(xs[rank()]), name="mx.ag.pending")
    assert_same(out.asnumpy(), np.concatenate(xs), "float32")
    assert_same((out + 1).asnumpy(), np.concatenate(xs) + 1, "float32")


def test_grouped_allgather() -> None:
    dtypes = ["int32", "float64", "uint8"]
    gathered = []
    tensors = []
    for i, dt in enumerate(dtypes):
        xs = [all_inputs((r + i + 1, 2), dt, "mx.gag", i, kind="any")[r] for r in range(size())]
        gathered.append(np.concatenate(xs))
        tensors.append(nd(xs[rank()]))
    outs = hvd.grouped_allgather(tensors, name="mx.gag")
    for out, expected, dt in zip(outs, gathered, dtypes):
        assert_same(out.asnumpy(), expected, dt)


def test_allgather_scalar_is_refused() -> None:
    with pytest.raises(ValueError):
        hvd.allgather(mx.nd.array(1.0), name="mx.ag.scalar")


# ------------------------------------------------------------------------------------ broadcast


@pytest.mark.parametrize("dtype", [*MX_DTYPES, "bool"])
def test_broadcast(dtype: str) -> None:
    root = size() - 1
    xs = all_inputs((3, 4), dtype, "mx.bc", kind="any")
    x = nd(xs[rank()])
    out = hvd.broadcast(x, root_rank=root, name=f"mx.bc.{dtype}")
    assert_same(out.asnumpy(), xs[root], dtype)
    assert_same(x.asnumpy(), xs[rank()], dtype)
    assert hvd.broadcast_(x, root_rank=0, name=f"mx.bc_.{dtype}") is x
    assert_same(x.asnumpy(), xs[0], dtype)


def test_broadcast_bad_root() -> None:
    with pytest.raises(ValueError):
        hvd.broadcast(mx.nd.ones((2,)), root_rank=size(), name="mx.bc.badroot")


# ------------------------------------------------------------------------------------- alltoall


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "float64"])
def test_alltoall_equal_split(dtype: str) -> None:
    n = size()
    xs = all_inputs((2 * n, 3), dtype, "mx.a2a", kind="any")
    out = hvd.alltoall(nd(xs[rank()]), name=f"mx.a2a.{dtype}")
    expected = np.concatenate([x[2 * rank():2 * rank() + 2] for x in xs])
    assert_same(out.asnumpy(), expected, dtype)


def test_alltoall_splits() -> None:
    n = size()

    def splits_of(r: int) -> list[int]:
        return [(r + q) % 3 for q in range(n)]

    xs = [all_inputs((sum(splits_of(r)) + 1, 2), "float32", "mx.a2a.s")[r] for r in range(n)]
    x = nd(xs[rank()])
    out, received = hvd.alltoall(x, splits=mx.nd.array(splits_of(rank()), dtype="int32"),
                                 name="mx.a2a.s")
    pieces = []
    for r in range(n):
        offsets = np.cumsum([0, *splits_of(r)])
        pieces.append(xs[r][offsets[rank()]:offsets[rank() + 1]])
    assert_same(out.asnumpy(), np.concatenate(pieces), "float32")
    assert received.asnumpy().tolist() == [splits_of(r)[rank()] for r in range(n)]


def test_alltoall_bad_splits() -> None:
    with pytest.raises(ValueError):
        hvd.alltoall(mx.nd.ones((4, 2)), splits=[1] * (size() + 1), name="mx.a2a.bad")


# -------------------------------------------------------------------------------- reducescatter


@pytest.mark.parametrize("dtype", ["int32", "float16", "float32", "float64"])
@pytest.mark.parametrize("op", ["sum", "average"])
def test_reducescatter(dtype: str, op: str) -> None:
    dim0 = 2 * size() + 1
    xs = all_inputs((dim0, 3), dtype, "mx.rs", op)
    out = hvd.reducescatter(nd(xs[rank()]), op=MX_OPS[op], name=f"mx.rs.{op}.{dtype}")
    rows = reducescatter_rows(dim0, size())
    start = sum(rows[:rank()])
    expected = reduce_ref(xs, op, dtype)[start:start + rows[rank()]]
    assert_same(out.asnumpy(), expected, dtype)


def test_reducescatter_scale_factors() -> None:
    xs = all_inputs((size() * 2, 2), "float64", "mx.rs.scale")
    out = hvd.reducescatter(nd(xs[rank()]), op=hvd.Sum, prescale_factor=0.5,
                            postscale_factor=3.0, name="mx.rs.scale")
    expected = reduce_ref(xs, "sum", "float64", 0.5, 3.0)[2 * rank():2 * rank() + 2]
    assert_close(out.asnumpy(), expected, "float64")


def test_grouped_reducescatter() -> None:
    inputs = [all_inputs((size() + i, 2), "float32", "mx.grs", i) for i in range(3)]
    outs = hvd.grouped_reducescatter([nd(xs[rank()]) for xs in inputs], op=hvd.Sum,
                                     name="mx.grs")
    for out, xs in zip(outs, inputs):
        rows = reducescatter_rows(xs[0].shape[0], size())
        start = sum(rows[:rank()])
        expected = reduce_ref(xs, "sum", "float32")[start:start + rows[rank()]]
        assert_same(out.asnumpy(), expected, "float32")


def test_reducescatter_min_is_refused() -> None:
    with pytest.raises(ValueError):
        hvd.reducescatter(mx.nd.ones((size(), 2)), op=hvd.Min, name="mx.rs.min")


# ------------------------------------------------------------------------------ errors and misc


def test_mismatched_shapes_raise_on_every_rank() -> None:
    require_ranks(2)
    x = mx.nd.ones((rank() + 1, 3))
    with pytest.raises(hora.MismatchError) as info:
        hvd.allreduce(x, name="mx.mm.shape")
    assert "mx.mm.shape" in str(info.value)
    with pytest.raises(hora.HoraError):
        hvd.grouped_allreduce_([mx.nd.ones((2,)), mx.nd.ones((rank() + 2,))], name="mx.mm.group")
    xs = all_inputs(7, "float32", "mx.mm.after")
    out = hvd.allreduce(nd(xs[rank()]), op=hvd.Sum, name="mx.mm.after")
    assert_same(out.asnumpy(), reduce_ref(xs, "sum", "float32"), "float32")


def test_mismatched_dtypes_raise_on_every_rank() -> None:
    require_ranks(2)
    x = mx.nd.ones((4,), dtype="float32" if rank() % 2 == 0 else "int32")
    with pytest.raises(hora.MismatchError):
        hvd.allreduce(x, name="mx.mm.dtype")


def test_arguments_refused_locally() -> None:
    with pytest.raises(TypeError):
        hvd.allreduce(np.ones(3, dtype=np.float32), name="mx.bad.type")
    sparse = mx.nd.ones((4, 2)).tostype("row_sparse")
    with pytest.raises(ValueError):
        hvd.allreduce(sparse, name="mx.bad.sparse")


def test_broadcast_and_allgather_object() -> None:
    obj = {"rank": rank(), "payload": list(range(rank() + 2))}
    got = hvd.broadcast_object(obj, root_rank=size() - 1, name="mx.obj")
    assert got == {"rank": size() - 1, "payload": list(range(size() + 1))}
    gathered = hvd.allgather_object(obj, name="mx.objs")
    assert gathered == [{"rank": r, "payload": list(range(r + 2))} for r in range(size())]


def test_topology_and_barrier() -> None:
    assert hvd.rank() == hora.rank() and hvd.size() == hora.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    hvd.barrier()
