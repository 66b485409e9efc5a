"""hora.jax collectives on JAX arrays, checked against NumPy on every rank.

Run under ``horarun -np N`` (2 to 4 ranks) with a Python that has JAX (build/venv-jax, see
tests/run_all.sh). Every rank computes every rank's input from a seed, so each rank can check the
result of a collective locally. Skips are decided the same way on every rank.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hora
import numpy as np
import pytest
from conftest import (
    DTYPES,
    FLOAT_DTYPES,
    OPS,
    SIZES,
    all_inputs,
    assert_close,
    assert_same,
    is_power_of_two,
    kind_for_op,
    np_dtype,
    rank,
    reduce_ref,
    reducescatter_rows,
    resolve_count,
    size,
)
from jax_helpers import host, jx, my_rows, require_ranks

jax = pytest.importorskip("jax")
hvd = pytest.importorskip("hora.jax", exc_type=ImportError)
jnp = jax.numpy


# ------------------------------------------------------------------------------------ allreduce


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce_every_op_and_dtype_matches_numpy(dtype: str, op: str) -> None:
    xs = all_inputs((3, 7), dtype, "jax.ar", op, kind=kind_for_op(op))
    x = jx(xs[rank()])
    out = hvd.allreduce(x, op=OPS[op], name=f"jax.ar.{op}.{dtype}")
    assert_same(host(out), reduce_ref(xs, op, dtype), dtype)
    assert_same(host(x), xs[rank()], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_allreduce_every_size_matches_numpy(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "jax.ar.size", count)
    out = hvd.allreduce(jx(xs[rank()]), op=hvd.Average, name=f"jax.ar.size.{count}.{dtype}")
    assert_same(host(out), reduce_ref(xs, "average", dtype), dtype)


@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize(("pre", "post"), [(0.5, 1.0), (1.0, 2.0), (2.0, 0.25)])
def test_allreduce_scale_factors(dtype: str, pre: float, post: float) -> None:
    xs = all_inputs(19, dtype, "jax.ar.scale", pre, post)
    out = hvd.allreduce(jx(xs[rank()]), op=hvd.Sum, prescale_factor=pre, postscale_factor=post,
                        name=f"jax.ar.scale.{dtype}.{pre}.{post}")
    assert_close(host(out), reduce_ref(xs, "sum", dtype, pre, post), dtype)


def test_allreduce_unnamed_and_scalar() -> None:
    xs = all_inputs((), "float32", "jax.ar.scalar")
    out = hvd.allreduce(jx(xs[rank()]), op=hvd.Sum)
    assert_same(host(out), reduce_ref(xs, "sum", "float32"), "float32")


def test_adasum_on_a_power_of_two() -> None:
    if not is_power_of_two(size()):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    from conftest import adasum_ref

    xs = all_inputs(64, "float64", "jax.adasum", kind="normal")
    out = hvd.allreduce(jx(xs[rank()]), op=hvd.Adasum, name="jax.adasum")
    np.testing.assert_allclose(host(out), adasum_ref(xs), rtol=1e-10, atol=1e-12)


def test_grouped_allreduce_mixed_dtypes_beyond_the_fusion_threshold() -> None:
    specs = [("float32", 0), ("bfloat16", 1), ("int64", 17), ("float64", "big"), ("bool", 1001)]
    inputs = [all_inputs(resolve_count(c, d), d, "jax.gar", i) for i, (d, c) in
              enumerate(specs)]
    outs = hvd.grouped_allreduce([jx(xs[rank()]) for xs in inputs], op=hvd.Sum, name="jax.gar")
    assert len(outs) == len(specs)
    for out, xs, (dtype, _) in zip(outs, inputs, specs):
        assert_same(host(out), reduce_ref(xs, "sum", dtype), dtype)
    assert hvd.grouped_allreduce([], name="jax.gar.empty") == []


def test_unsupported_dtypes_are_refused_on_every_rank() -> None:
    for dtype in (jnp.uint32, jnp.complex64):
        with pytest.raises(ValueError, match="not supported"):
            hvd.allreduce(jnp.ones(3, dtype=dtype), name=f"jax.bad.{jnp.dtype(dtype).name}")


def test_non_arrays_are_refused() -> None:
    with pytest.raises(TypeError, match="jax.Array"):
        hvd.allreduce([1.0, 2.0], name="jax.bad.list")


# ------------------------------------------------------------------------ allgather, broadcast


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_allgather_every_size_and_dtype(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    # Different first dimensions per rank: rank r sends n + r rows.
    xs = [all_inputs((n + r, 2), dtype, "jax.ag", count, kind="any", ranks=[r])[0]
          for r in range(size())]
    out = hvd.allgather(jx(xs[rank()]), name=f"jax.ag.{count}.{dtype}")
    assert_same(host(out), np.concatenate(xs), dtype)


def test_grouped_allgather() -> None:
    inputs = [all_inputs((i + 1, 3), d, "jax.gag", i, kind="any")
              for i, d in enumerate(["bfloat16", "int16", "float32"])]
    outs = hvd.grouped_allgather([jx(xs[rank()]) for xs in inputs], name="jax.gag")
    for out, xs, d in zip(outs, inputs, ["bfloat16", "int16", "float32"]):
        assert_same(host(out), np.concatenate(xs), d)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_broadcast_every_size_and_dtype(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    root = size() - 1
    xs = all_inputs(n, dtype, "jax.bc", count, kind="any")
    out = hvd.broadcast(jx(xs[rank()]), root_rank=root, name=f"jax.bc.{count}.{dtype}")
    assert_same(host(out), xs[root], dtype)


# ----------------------------------------------------------------------- alltoall, reducescatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_even_split(dtype: str) -> None:
    xs = all_inputs((2 * size(), 3), dtype, "jax.a2a", kind="any")
    out = hvd.alltoall(jx(xs[rank()]), name=f"jax.a2a.{dtype}")
    expected = np.concatenate([x[2 * rank():2 * rank() + 2] for x in xs])
    assert_same(host(out), expected, dtype)


def test_alltoall_with_splits_returns_received_splits() -> None:
    # Rank r sends r + i rows to rank i (the last row of its input is never sent).
    def splits_of(r: int) -> list[int]:
        return [r + i for i in range(size())]

    xs = [all_inputs((sum(splits_of(r)) + 1, 2), "float32", "jax.a2av", kind="any", ranks=[r])[0]
          for r in range(size())]
    out, received = hvd.alltoall(jx(xs[rank()]), splits=jnp.asarray(splits_of(rank())),
                                 name="jax.a2av")
    expected = []
    for r in range(size()):
        start = sum(splits_of(r)[:rank()])
        expected.append(xs[r][start:start + splits_of(r)[rank()]])
    assert_same(host(out), np.concatenate(expected), "float32")
    assert host(received).tolist() == [r + rank() for r in range(size())]


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bool"])
@pytest.mark.parametrize("count", [0, 1, 17, "big"])
def test_reducescatter_every_size_and_dtype(dtype: str, count: int | str) -> None:
    rows = resolve_count(count, dtype) // 4 + size() + 1 if count == "big" else int(count)
    xs = all_inputs((rows, 4), dtype, "jax.rs", count)
    out = hvd.reducescatter(jx(xs[rank()]), op=hvd.Sum, name=f"jax.rs.{count}.{dtype}")
    assert_same(host(out), reduce_ref(xs, "sum", dtype)[my_rows(rows)], dtype)


def test_grouped_reducescatter_average() -> None:
    inputs = [all_inputs((size() + i, 2), "float32", "jax.grs", i) for i in range(3)]
    outs = hvd.grouped_reducescatter([jx(xs[rank()]) for xs in inputs], name="jax.grs")
    for out, xs in zip(outs, inputs):
        expected = reduce_ref(xs, "average", "float32")[my_rows(xs[0].shape[0])]
        assert_same(host(out), expected, "float32")


def test_reducescatter_min_is_refused() -> None:
    with pytest.raises(ValueError):
        hvd.reducescatter(jnp.ones((size(), 2)), op=hvd.Min, name="jax.rs.min")


# ---------------------------------------------------------------------------------- process sets


def test_collectives_in_a_process_set_of_the_even_ranks() -> None:
    require_ranks(2)
    members = [r for r in range(size()) if r % 2 == 0]
    evens = hvd.add_process_set(members)
    try:
        if rank() in members:
            xs = all_inputs(11, "float32", "jax.ps", ranks=members)
            mine = xs[members.index(rank())]
            out = hvd.allreduce(jx(mine), op=hvd.Sum, name="jax.ps.ar", process_set=evens)
            assert_same(host(out), reduce_ref(xs, "sum", "float32"), "float32")
            gathered = hvd.allgather(jx(mine), name="jax.ps.ag", process_set=evens)
            assert_same(host(gathered), np.concatenate(xs), "float32")
            root = members[-1]
            got = hvd.broadcast(jx(mine), root_rank=root, name="jax.ps.bc", process_set=evens)
            assert_same(host(got), xs[-1], "float32")
        # Every rank, in the set or not, goes on to the next global collective together.
        hvd.barrier()
    finally:
        hvd.remove_process_set(evens)


# ------------------------------------------------------------------------------ errors and misc


def test_mismatched_shapes_raise_on_every_rank() -> None:
    require_ranks(2)
    with pytest.raises(hora.MismatchError) as info:
        hvd.allreduce(jnp.ones((rank() + 1, 3)), name="jax.mm.shape")
    assert "jax.mm.shape" in str(info.value)
    with pytest.raises(hora.HoraError):
        hvd.grouped_allreduce([jnp.ones(2), jnp.ones(rank() + 2)], name="jax.mm.group")
    xs = all_inputs(7, "float32", "jax.mm.after")
    out = hvd.allreduce(jx(xs[rank()]), op=hvd.Sum, name="jax.mm.after")
    assert_same(host(out), reduce_ref(xs, "sum", "float32"), "float32")


def test_mismatched_dtypes_raise_on_every_rank() -> None:
    require_ranks(2)
    x = jnp.ones(4, dtype=jnp.float32 if rank() % 2 == 0 else jnp.int32)
    with pytest.raises(hora.MismatchError):
        hvd.allreduce(x, name="jax.mm.dtype")


def test_broadcast_and_allgather_object() -> None:
    obj = {"rank": rank(), "payload": jnp.arange(rank() + 2)}
    got = hvd.broadcast_object(obj, root_rank=size() - 1, name="jax.obj")
    assert got["rank"] == size() - 1 and host(got["payload"]).tolist() == list(range(size() + 1))
    gathered = hvd.allgather_object(rank() * 10, name="jax.objs")
    assert gathered == [r * 10 for r in range(size())]


def test_topology_barrier_and_join() -> None:
    assert hvd.rank() == hora.rank() and hvd.size() == hora.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.is_initialized()
    hvd.barrier()
    assert hvd.join() in range(size())


# ----------------------------------------------------------------- gradients under eager jax.grad


def weights(shape: tuple[int, ...], r: int, tag: str) -> np.ndarray:
    """Rank ``r``'s cotangent weights for a loss ``sum(w * collective(x))``."""
    return all_inputs(shape, "float64", "jax.grad.w", tag, ranks=[r])[0]


@pytest.mark.parametrize("op", ["sum", "average"])
def test_grad_of_allreduce_is_the_allreduce_of_the_gradient(op: str) -> None:
    x = jnp.asarray(all_inputs(5, "float64", "jax.grad.ar", ranks=[rank()])[0])
    ws = [weights((5,), r, "ar") for r in range(size())]
    grad = jax.grad(lambda v: (jnp.asarray(ws[rank()]) * hvd.allreduce(v, op=OPS[op])).sum())(x)
    np.testing.assert_allclose(host(grad), reduce_ref(ws, op, "float64"), rtol=1e-12)


def test_grad_of_grouped_allreduce() -> None:
    ws = [weights((3,), r, "gar") for r in range(size())]

    def loss(a: jax.Array, b: jax.Array) -> jax.Array:
        ra, rb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
        return (jnp.asarray(ws[rank()]) * ra).sum() + 2.0 * rb.sum()

    ga, gb = jax.grad(loss, argnums=(0, 1))(jnp.ones(3), jnp.ones(2))
    np.testing.assert_allclose(host(ga), reduce_ref(ws, "sum", "float64"), rtol=1e-12)
    np.testing.assert_allclose(host(gb), np.full(2, 2.0 * size()), rtol=1e-12)


def test_grad_of_allgather_is_my_rows_of_the_averaged_gradient() -> None:
    dims = [r + 1 for r in range(size())]
    total = sum(dims)
    ws = [weights((total, 2), r, "ag") for r in range(size())]
    x = jnp.ones((dims[rank()], 2), jnp.float64)
    grad = jax.grad(lambda v: (jnp.asarray(ws[rank()]) * hvd.allgather(v)).sum())(x)
    start = sum(dims[:rank()])
    expected = np.mean(ws, axis=0)[start:start + dims[rank()]]
    np.testing.assert_allclose(host(grad), expected, rtol=1e-12)


def test_grad_of_broadcast_reaches_the_root_only() -> None:
    ws = [weights((4,), r, "bc") for r in range(size())]
    grad = jax.grad(lambda v: (jnp.asarray(ws[rank()]) * hvd.broadcast(v, 0)).sum())(
        jnp.ones(4, jnp.float64))
    expected = np.mean(ws, axis=0) if rank() == 0 else np.zeros(4)
    np.testing.assert_allclose(host(grad), expected, rtol=1e-12)


def test_grad_of_alltoall_sends_the_gradient_back() -> None:
    ws = [weights((2 * size(),), r, "a2a") for r in range(size())]
    x = jnp.ones(2 * size(), jnp.float64)
    grad = jax.grad(lambda v: (jnp.asarray(ws[rank()]) * hvd.alltoall(v)).sum())(x)
    # Row j of my input went to rank j // 2 as its row 2 * rank() + j % 2.
    expected = [ws[j // 2][2 * rank() + j % 2] for j in range(2 * size())]
    np.testing.assert_allclose(host(grad), expected, rtol=1e-12)


def test_grad_of_reducescatter_sum_is_the_scaled_allgather() -> None:
    rows = 2 * size() + 1
    ws = [weights((reducescatter_rows(rows, size())[r],), r, "rs") for r in range(size())]
    x = jnp.ones(rows, jnp.float64)
    grad = jax.grad(lambda v: (jnp.asarray(ws[rank()]) *
                               hvd.reducescatter(v, op=hvd.Sum)).sum())(x)
    np.testing.assert_allclose(host(grad), np.concatenate(ws) * size(), rtol=1e-12)


def test_grad_of_min_is_refused() -> None:
    with pytest.raises(NotImplementedError):
        jax.grad(lambda v: hvd.allreduce(v, op=hvd.Min).sum())(jnp.ones(3))


def test_float_dtypes_keep_their_dtype() -> None:
    for dtype in FLOAT_DTYPES:
        out = hvd.allreduce(jnp.ones(3, dtype=np_dtype(dtype)), name=f"jax.keep.{dtype}")
        assert out.dtype == np_dtype(dtype)
