"""hora.jax collectives inside jax.jit (XLA custom calls), checked against NumPy on every rank.

Run under ``horarun -np N`` (2 to 4 ranks) with a Python that has JAX (build/venv-jax). Inputs
come from seeds, as in test_jax_ops.py; inside jit every rank passes the same shapes (allgather's
first dimensions and alltoall's splits are fixed when the program is traced).
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hora
import numpy as np
import pytest
from conftest import (
    DTYPES,
    OPS,
    SIZES,
    all_inputs,
    assert_close,
    assert_same,
    is_power_of_two,
    kind_for_op,
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


def custom_calls(fn: object, *args: object) -> list[str]:
    """The tensor names of every Hora custom call in the lowered program, in program order."""
    text = jax.jit(fn).lower(*args).as_text()
    found = re.findall(r'custom_call @hora_collective\(.*?names = "([^"]*)"', text)
    return [names.replace("\\0A", "\n") for names in found]  # MLIR escapes the newline


# ---------------------------------------------------------------------------------- allreduce


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce_every_op_and_dtype_inside_jit(dtype: str, op: str) -> None:
    if op == "adasum" and (not is_power_of_two(size()) or dtype not in ("float32", "float64")):
        pytest.skip("Adasum: floating point at a power-of-two number of ranks")
    xs = all_inputs((3, 7), dtype, "jit.ar", op, kind=kind_for_op(op))
    out = jax.jit(lambda x: hvd.allreduce(x, op=OPS[op], name=f"jit.ar.{op}.{dtype}"))(
        jx(xs[rank()]))
    if op == "adasum":
        from conftest import adasum_ref

        np.testing.assert_allclose(host(out), adasum_ref(xs), rtol=1e-5)
    else:
        assert_same(host(out), reduce_ref(xs, op, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_allreduce_every_size_inside_jit(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "jit.ar.size", count)
    out = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Average))(jx(xs[rank()]))
    assert_same(host(out), reduce_ref(xs, "average", dtype), dtype)


@pytest.mark.parametrize(("pre", "post"), [(0.5, 1.0), (2.0, 0.25)])
def test_allreduce_scale_factors_inside_jit(pre: float, post: float) -> None:
    xs = all_inputs(19, "float32", "jit.ar.scale", pre, post)
    out = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=pre,
                                          postscale_factor=post))(jx(xs[rank()]))
    assert_close(host(out), reduce_ref(xs, "sum", "float32", pre, post), "float32")


def test_grouped_allreduce_is_one_custom_call_of_mixed_dtypes() -> None:
    specs = [("float32", 0), ("bfloat16", 1), ("int64", 17), ("float64", "big"), ("bool", 1001)]
    inputs = [all_inputs(resolve_count(c, d), d, "jit.gar", i) for i, (d, c) in
              enumerate(specs)]
    arrays = [jx(xs[rank()]) for xs in inputs]

    def step(values: list) -> list:
        return hvd.grouped_allreduce(values, op=hvd.Sum, name="jit.gar")

    calls = custom_calls(step, arrays)
    assert calls == ["\n".join(f"grouped_allreduce.jit.gar_{i}of5" for i in range(1, 6))]
    for out, xs, (dtype, _) in zip(jax.jit(step)(arrays), inputs, specs):
        assert_same(host(out), reduce_ref(xs, "sum", dtype), dtype)


# -------------------------------------------------------------- allgather, broadcast, alltoall


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_allgather_every_size_inside_jit(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs((n, 2), dtype, "jit.ag", count, kind="any")
    out = jax.jit(hvd.allgather)(jx(xs[rank()]))
    assert_same(host(out), np.concatenate(xs), dtype)


def test_allgather_of_different_first_dimensions_fails_inside_jit() -> None:
    require_ranks(2)
    rows = 1 if rank() == 0 else 2  # no rank's traced shape fits the 2 * size - 1 rows
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(jax.jit(lambda x: hvd.allgather(x, name="jit.ag.uneven"))(
            jnp.ones((rows, 2))))
    error = hvd.engine_error(info.value)
    assert isinstance(error, ValueError) and "same shape" in str(error)
    check_next_jitted_op_works("jit.ag.uneven.after")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_broadcast_every_size_inside_jit(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    root = size() - 1
    xs = all_inputs(n, dtype, "jit.bc", count, kind="any")
    out = jax.jit(lambda x: hvd.broadcast(x, root_rank=root))(jx(xs[rank()]))
    assert_same(host(out), xs[root], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [0, 1, 3])
def test_alltoall_equal_split_inside_jit(dtype: str, rows: int) -> None:
    xs = all_inputs((rows * size(), 3), dtype, "jit.a2a", rows, kind="any")
    out = jax.jit(hvd.alltoall)(jx(xs[rank()]))
    expected = np.concatenate([x[rows * rank():rows * (rank() + 1)] for x in xs])
    assert_same(host(out), expected, dtype)


def test_alltoall_with_splits_is_refused_inside_jit() -> None:
    with pytest.raises(hvd.NotSupportedError, match="splits=None"):
        jax.jit(lambda x: hvd.alltoall(x, splits=[1] * size())[0])(jnp.ones((size(), 2)))


# ----------------------------------------------------------------------------- reducescatter


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bool"])
@pytest.mark.parametrize("count", [0, 1, 17, "big"])
def test_reducescatter_every_size_inside_jit(dtype: str, count: int | str) -> None:
    rows = resolve_count(count, dtype) // 4 + size() + 1 if count == "big" else int(count)
    xs = all_inputs((rows, 4), dtype, "jit.rs", count)
    out = jax.jit(lambda x: hvd.reducescatter(x, op=hvd.Sum))(jx(xs[rank()]))
    assert_same(host(out), reduce_ref(xs, "sum", dtype)[my_rows(rows)], dtype)


def test_grouped_reducescatter_average_inside_jit() -> None:
    inputs = [all_inputs((size() + i, 2), "float32", "jit.grs", i) for i in range(3)]
    outs = jax.jit(hvd.grouped_reducescatter)([jx(xs[rank()]) for xs in inputs])
    for out, xs in zip(outs, inputs):
        expected = reduce_ref(xs, "average", "float32")[my_rows(xs[0].shape[0])]
        assert_same(host(out), expected, "float32")


def test_reducescatter_min_is_refused_when_traced() -> None:
    with pytest.raises(hora.InvalidCollectiveError, match="AVERAGE and SUM"):
        jax.jit(lambda x: hvd.reducescatter(x, op=hvd.Min))(jnp.ones((size(), 2)))


# ------------------------------------------------------------------ order, names, control flow


def check_next_jitted_op_works(tag: str) -> None:
    xs = all_inputs(5, "float32", tag)
    out = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum, name=tag))(jx(xs[rank()]))
    assert_same(host(out), reduce_ref(xs, "sum", "float32"), "float32")


def test_calls_are_chained_by_tokens_in_program_order() -> None:
    def two(a: jax.Array, b: jax.Array) -> tuple:
        slow = a
        for _ in range(20):
            slow = jnp.tanh(slow @ slow.T) @ slow  # the first call's input takes longest
        return hvd.allreduce(slow, name="jit.order.1"), hvd.allreduce(b, name="jit.order.2")

    a, b = jnp.ones((64, 64)) / 64, jnp.ones(3)
    text = jax.jit(two).lower(a, b).as_text()
    assert "!stablehlo.token" in text
    assert custom_calls(two, a, b) == ["allreduce.jit.order.1", "allreduce.jit.order.2"]
    out = jax.jit(two)(a, b)
    assert host(out[1]).tolist() == [1.0] * 3


def test_unnamed_calls_are_named_by_line_and_count_and_survive_a_retrace() -> None:
    def three(x: jax.Array) -> list:
        return [hvd.allreduce(x * k, op=hvd.Sum) for k in range(3)]

    names = custom_calls(three, jnp.ones(2))
    assert len(names) == 3 and len(set(names)) == 3
    assert all(re.fullmatch(r"allreduce\.jit\.test_jax_jit\.py:\d+(\.[12])?", n) for n in names)
    step = jax.jit(three)
    first = step(jnp.ones(2))
    if rank() == 0:
        jax.clear_caches()  # rank 0 alone traces again: the names must not change
    second = jax.jit(three)(jnp.ones(2))
    for k, (a, b) in enumerate(zip(first, second)):
        assert host(a).tolist() == host(b).tolist() == [float(k * size())] * 2


def test_collectives_inside_scan_fori_loop_checkpoint_and_cond() -> None:
    def body(carry: jax.Array, _: None) -> tuple:
        return hvd.allreduce(carry, op=hvd.Average) + 1.0, None

    out, _ = jax.jit(lambda x: jax.lax.scan(body, x, None, length=4))(jnp.full(3, float(rank())))
    mean = (size() - 1) / 2
    assert host(out).tolist() == pytest.approx([mean + 4.0] * 3)

    looped = jax.jit(lambda x: jax.lax.fori_loop(
        0, 3, lambda i, v: jax.checkpoint(lambda w: hvd.allreduce(w, op=hvd.Sum))(v), x))
    assert host(looped(jnp.ones(2))).tolist() == [float(size() ** 3)] * 2
    remat_grad = jax.jit(jax.grad(lambda v: jax.checkpoint(
        lambda w: hvd.allreduce(w * w, op=hvd.Sum))(v).sum()))(jnp.ones(2))
    assert host(remat_grad).tolist() == [2.0 * size()] * 2

    flag = jnp.asarray(True)
    got = jax.jit(lambda p, x: jax.lax.cond(p, lambda v: hvd.allreduce(v, op=hvd.Sum),
                                            lambda v: v, x))(flag, jnp.ones(2))
    assert host(got).tolist() == [float(size())] * 2


def test_branches_that_differ_between_ranks_fail_on_every_rank() -> None:
    require_ranks(2)

    def step(x: jax.Array) -> jax.Array:
        if rank() == 0:  # each rank traces its own program: here they disagree on a shape
            return hvd.allreduce(x[:2], name="jit.diverge")
        return hvd.allreduce(x, name="jit.diverge")

    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(jax.jit(step)(jnp.ones(3)))
    error = hvd.engine_error(info.value)
    assert isinstance(error, hora.MismatchError), repr(error)
    assert "jit.diverge" in str(error)
    check_next_jitted_op_works("jit.diverge.after")


def test_mismatched_dtypes_inside_jit_raise_the_engine_error() -> None:
    require_ranks(2)
    x = jnp.ones(4, dtype=jnp.float32 if rank() % 2 == 0 else jnp.int32)
    with pytest.raises(jax.errors.JaxRuntimeError, match="hora.errors.MismatchError"):
        jax.block_until_ready(jax.jit(lambda v: hvd.allreduce(v, name="jit.mm.dtype"))(x))
    check_next_jitted_op_works("jit.mm.dtype.after")


def test_unsupported_dtypes_fail_inside_jit() -> None:
    with pytest.raises(jax.errors.JaxRuntimeError, match="not supported"):
        jax.block_until_ready(jax.jit(lambda v: hvd.allreduce(v, name="jit.u32"))(
            jnp.ones(3, jnp.uint32)))
    check_next_jitted_op_works("jit.u32.after")


def test_vmap_is_refused() -> None:
    with pytest.raises(hvd.NotSupportedError, match="jax.vmap"):
        jax.vmap(lambda x: hvd.allreduce(x))(jnp.ones((2, 3)))
    with pytest.raises(hvd.NotSupportedError, match="jax.vmap"):
        jax.jit(jax.vmap(lambda x: hvd.allgather(x)))(jnp.ones((2, 3, 1)))


def test_object_collectives_are_refused_inside_jit() -> None:
    with pytest.raises(hvd.NotSupportedError, match="broadcast_parameters runs eagerly only"):
        jax.jit(lambda x: hvd.broadcast_parameters({"x": x})["x"])(jnp.ones(2))


def test_process_set_inside_jit() -> None:
    require_ranks(2)
    members = [r for r in range(size()) if r % 2 == 0]
    evens = hvd.add_process_set(members)
    try:
        if rank() in members:
            xs = all_inputs(11, "float32", "jit.ps", ranks=members)
            mine = jx(xs[members.index(rank())])
            out = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum, process_set=evens))(mine)
            assert_same(host(out), reduce_ref(xs, "sum", "float32"), "float32")
            gathered = jax.jit(lambda x: hvd.allgather(x, process_set=evens))(mine)
            assert_same(host(gathered), np.concatenate(xs), "float32")
        elif size() > 1:
            with pytest.raises(ValueError, match="not a member"):
                jax.jit(lambda x: hvd.allreduce(x, process_set=evens))(jnp.ones(2))
        hvd.barrier()
    finally:
        hvd.remove_process_set(evens)


# --------------------------------------------------------------------- gradients under jit(grad)


def weights(shape: tuple[int, ...], r: int, tag: str) -> np.ndarray:
    return all_inputs(shape, "float64", "jit.grad.w", tag, ranks=[r])[0]


def grads_of(loss: object, x: jax.Array) -> tuple[np.ndarray, np.ndarray]:
    """The gradient of ``loss`` at ``x`` under jit and eagerly (the eager path's rules are
    checked against references in test_jax_ops.py)."""
    return host(jax.jit(jax.grad(loss))(x)), host(jax.grad(loss)(x))


@pytest.mark.parametrize("op", ["sum", "average"])
def test_jitted_grad_of_allreduce(op: str) -> None:
    ws = [weights((5,), r, "ar") for r in range(size())]
    x = jnp.asarray(all_inputs(5, "float64", "jit.grad.ar", ranks=[rank()])[0])
    jitted, eager = grads_of(
        lambda v: (jnp.asarray(ws[rank()]) * hvd.allreduce(v, op=OPS[op])).sum(), x)
    np.testing.assert_allclose(jitted, reduce_ref(ws, op, "float64"), rtol=1e-12)
    np.testing.assert_allclose(jitted, eager, rtol=1e-12)


def test_jitted_grad_of_allgather_broadcast_alltoall_reducescatter() -> None:
    n = 2 * size()
    ws = [weights((n * size(),), r, "ag") for r in range(size())]
    w = jnp.asarray(ws[rank()])
    x = jnp.ones(n, jnp.float64)
    jitted, _ = grads_of(lambda v: (w * hvd.allgather(v)).sum(), x)
    np.testing.assert_allclose(jitted, np.mean(ws, axis=0)[rank() * n:(rank() + 1) * n],
                               rtol=1e-12)

    jitted, _ = grads_of(lambda v: (w[:n] * hvd.broadcast(v, 0)).sum(), x)
    expected = np.mean([wr[:n] for wr in ws], axis=0) if rank() == 0 else np.zeros(n)
    np.testing.assert_allclose(jitted, expected, rtol=1e-12)

    jitted, eager = grads_of(lambda v: (w[:n] * hvd.alltoall(v)).sum(), x)
    np.testing.assert_allclose(jitted, [ws[j // 2][2 * rank() + j % 2] for j in range(n)],
                               rtol=1e-12)
    np.testing.assert_allclose(jitted, eager, rtol=1e-12)

    rows = n + 1
    share = reducescatter_rows(rows, size())[rank()]
    jitted, eager = grads_of(
        lambda v: (w[:share] * hvd.reducescatter(v, op=hvd.Sum)).sum(), jnp.ones(rows))
    np.testing.assert_allclose(jitted, eager, rtol=1e-12)
    expected = np.concatenate([ws[r][:reducescatter_rows(rows, size())[r]]
                               for r in range(size())]) * size()
    np.testing.assert_allclose(jitted, expected, rtol=1e-12)


def test_jitted_grad_matches_finite_differences() -> None:
    x = jnp.asarray(all_inputs(4, "float64", "jit.fd", ranks=[rank()])[0])

    def loss(v: jax.Array) -> jax.Array:
        return jnp.sum(jnp.sin(hvd.allreduce(v * v, op=hvd.Average)) * v)

    grad = host(jax.jit(jax.grad(loss))(x))
    eps = 1e-6
    for i in range(4):
        # Every rank moves its own coordinate i together: the finite difference then holds the
        # sum over ranks of d loss_r / d x_i, which rank 0 checks against the gradient's sum.
        step = jnp.zeros(4, jnp.float64).at[i].set(eps)
        diff = (jax.jit(loss)(x + step) - jax.jit(loss)(x - step)) / (2 * eps)
        total_diff = float(host(jax.jit(lambda d: hvd.allreduce(d, op=hvd.Sum))(
            jnp.asarray([diff]))[0]))
        total_grad = float(host(jax.jit(lambda g: hvd.allreduce(g, op=hvd.Sum))(
            jnp.asarray([grad[i]])))[0])
        assert total_diff == pytest.approx(total_grad, rel=1e-5, abs=1e-8)


def test_elastic_run_sees_the_hora_error_of_a_jitted_step() -> None:
    require_ranks(2)
    from hora.jax.elastic import raising_engine_errors

    @raising_engine_errors
    def step(x: jax.Array) -> jax.Array:
        return jax.block_until_ready(jax.jit(lambda v: hvd.allreduce(v, name="jit.elastic"))(x))

    with pytest.raises(hora.MismatchError, match="jit.elastic") as info:
        step(jnp.ones(rank() + 1))
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
    check_next_jitted_op_works("jit.elastic.after")


def test_elastic_run_drops_compiled_programs_after_a_reformation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hora.jax import elastic

    calls: list[str] = []
    monkeypatch.setattr(elastic, "reform_job", lambda: calls.append("reform"))
    monkeypatch.setattr(jax, "clear_caches", lambda: calls.append("clear caches"))
    attempts: list[int] = []

    @hvd.elastic.run
    def train(state: object) -> str:
        attempts.append(1)
        if len(attempts) == 1:  # as the driver interrupts every rank when hosts change
            raise hora.HostsUpdatedInterrupt(skip_sync=True)
        return "done"

    assert train(hvd.elastic.JaxState(params={"w": jnp.ones(2)})) == "done"
    assert calls == ["reform", "clear caches"] and len(attempts) == 2
