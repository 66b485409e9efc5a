"""Barrier, join, process sets (static and dynamic), grouped ops, fusion, name reuse, re-init."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import hora
import numpy as np
import pytest
from conftest import (
    OPS,
    all_inputs,
    assert_close,
    assert_same,
    big_count,
    check_next_op_works,
    make_input,
    rank,
    reduce_ref,
    reducescatter_rows,
    size,
)

# --------------------------------------------------------------------------------------------
# Topology and lifecycle


def test_topology() -> None:
    """rank/size agree with the launcher's environment; one host means local == world."""
    n = size()
    r = rank()
    assert 0 <= r < n
    for prefix in ("HORA_", "HOROVOD_"):
        if os.environ.get(prefix + "SIZE"):
            assert n == int(os.environ[prefix + "SIZE"])
            assert r == int(os.environ[prefix + "RANK"])
            break
    assert hora.local_size() == n
    assert hora.local_rank() == r
    assert hora.cross_size() == 1
    assert hora.cross_rank() == 0
    assert hora.is_homogeneous() is True
    assert hora.is_initialized() is True
    ranks = hora.allgather(np.array([r], dtype=np.int32), name="topology.ranks")
    assert ranks.tolist() == list(range(n))


def test_collectives_transport() -> None:
    """Every rank of these jobs runs on this host: with TCP for both roles, the collectives move
    through shared memory unless HORA_SHM_DISABLE=1; a job of one rank, or one using MPI, has no
    shared-memory transport."""
    name = hora._core.transport_name()
    if size() == 1 or "mpi" in name:
        assert "shm" not in name
    elif os.environ.get("HORA_SHM_DISABLE") == "1":
        assert name == "tcp"
    else:
        assert name == "tcp+shm"


def test_build_queries() -> None:
    """The build queries answer booleans (nccl_built: a version code or a bool)."""
    for fn in (
        hora.mpi_built,
        hora.gloo_built,
        hora.cuda_built,
        hora.rocm_built,
        hora.ddl_built,
        hora.ccl_built,
        hora.mpi_enabled,
        hora.gloo_enabled,
    ):
        assert isinstance(fn(), bool), fn.__name__
    assert isinstance(hora.nccl_built(), (bool, int))
    if hora.mpi_enabled():
        assert isinstance(hora.mpi_threads_supported(), bool)
    else:  # as in Horovod: only meaningful when MPI is in use
        with pytest.raises(ValueError):
            hora.mpi_threads_supported()


def test_init_shutdown_init() -> None:
    """shutdown() then init() gives a working runtime again; getters fail while shut down."""
    n, r = size(), rank()
    check_next_op_works("before-reinit")
    hora.shutdown()
    assert hora.is_initialized() is False
    with pytest.raises(ValueError):
        hora.rank()
    with pytest.raises(ValueError):
        hora.size()
    with pytest.raises((ValueError, hora.HoraError)):
        hora.allreduce(np.ones(3, np.float32), op=hora.Sum, name="after_shutdown")
    hora.shutdown()  # idempotent
    hora.init()
    assert hora.is_initialized() is True
    assert (hora.size(), hora.rank()) == (n, r)
    hora.init()  # a no-op when already initialized
    check_next_op_works("after-reinit")
    for cycle in range(2):
        hora.shutdown()
        hora.init()
        check_next_op_works(f"reinit-cycle-{cycle}")


# --------------------------------------------------------------------------------------------
# Barrier and join


def test_barrier_orders_side_effects() -> None:
    """After barrier() every rank's earlier side effect is visible."""
    shared = hora.broadcast_object(
        tempfile.mkdtemp(prefix="hora-barrier-") if rank() == 0 else None,
        root_rank=0,
        name="barrier.dir",
    )
    directory = Path(shared)
    for step in range(8):  # barriers after the session's first are cached: so are these
        time.sleep(0.02 * ((rank() + step) % size()))
        (directory / f"{step}.{rank()}").write_text("x")
        hora.barrier()
        missing = [q for q in range(size()) if not (directory / f"{step}.{q}").exists()]
        assert missing == [], f"step {step}: files of ranks {missing} not there after barrier"
    hora.barrier()
    if rank() == 0:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def test_join_allreduce() -> None:
    """Ranks that joined contribute zeros; Average still divides by the full size."""
    n, r = size(), rank()
    for step in range(r + 1):  # rank q takes part in steps 0..q
        xs = all_inputs(50, "float32", "join", step)
        op = "sum" if step % 2 == 0 else "average"
        out = hora.allreduce(xs[r], op=OPS[op], name=f"join.{step}")
        total = reduce_ref(xs[step:], "sum", "float32")
        expected = total if op == "sum" else (total.astype(np.float64) / n).astype(np.float32)
        assert_close(out, expected, "float32")
    last = hora.join()
    assert last == n - 1  # the rank with the most steps can only join after all others did
    check_next_op_works("after-join")


def test_join_then_unsupported_op_fails_on_calling_ranks() -> None:
    """While a rank has joined, every rank that calls allgather gets an error at once.

    The calls are unnamed and each rank joins first in a different round, so in one round the
    automatic names differ across the calling ranks: the error cannot wait for them to match.
    Over all rounds every rank calls allgather size-1 times, so the names agree again after.
    """
    n, r = size(), rank()
    x = np.ones((17, 3), dtype=np.float32)
    if n == 1:
        # No rank is left to call allgather while another has joined: join returns at once and
        # allgather works after it.
        assert hora.join() == 0
        assert hora.allgather(x).shape == (17, 3)
        check_next_op_works("after-join-allgather")
        return
    for first in range(n):
        if r != first:
            with pytest.raises(hora.InvalidCollectiveError, match="not supported with Join"):
                hora.allgather(x)
        last = hora.join()
        assert last != first
        assert hora.allgather_object(last, name=f"join.unsupported.{first}") == [last] * n
    out = hora.allgather(x)
    assert out.shape == (17 * n, 3)
    check_next_op_works("after-join-allgather")


def test_join_agrees_on_last_rank() -> None:
    """join() returns the same rank everywhere, and ops work after it."""
    time.sleep(0.01 * rank())
    last = hora.join()
    everyone = hora.allgather(np.array([last], dtype=np.int64), name="join.last")
    assert len(set(everyone.tolist())) == 1
    assert 0 <= last < size()
    check_next_op_works("after-join-2")


# --------------------------------------------------------------------------------------------
# Process sets


def _distinct_subsets(candidates: list[list[int]]) -> list[list[int]]:
    """Non-empty candidates without duplicates and without the world set (which exists already)."""
    world = list(range(size()))
    out: list[list[int]] = []
    for c in candidates:
        if c and c != world and c not in out:
            out.append(c)
    return out


def _exercise_set(ps: hora.ProcessSet, members: list[int], tag: str) -> None:
    """Every collective on ``ps`` by its members, checked against NumPy over the members' data."""
    me = rank()
    assert ps.included() == (me in members)
    assert ps.size() == len(members)
    assert list(ps.ranks) == members
    if me not in members:
        return
    sr = members.index(me)
    m = len(members)
    assert ps.rank() == sr

    xs = all_inputs(101, "float32", tag, "ar", ranks=members)
    out = hora.allreduce(xs[sr], op=hora.Sum, name=f"{tag}.ar", process_set=ps)
    assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")
    out = hora.allreduce(xs[sr], op=hora.Average, name=f"{tag}.avg", process_set=ps)
    assert_close(out, reduce_ref(xs, "average", "float32"), "float32")

    gs = [make_input(q, (q + 1, 2), "int32", tag, "ag", kind="any") for q in members]
    out = hora.allgather(gs[sr], name=f"{tag}.ag", process_set=ps)
    assert_same(out, np.concatenate(gs), "int32")

    bs = all_inputs(33, "int64", tag, "bc", kind="any", ranks=members)
    out = hora.broadcast(bs[sr], root_rank=members[-1], name=f"{tag}.bc", process_set=ps)
    assert_same(out, bs[-1], "int64")  # root_rank is a global rank

    rs = all_inputs((2 * m + 1, 2), "float64", tag, "rs", ranks=members)
    out = hora.reducescatter(rs[sr], op=hora.Sum, name=f"{tag}.rs", process_set=ps)
    rows = reducescatter_rows(2 * m + 1, m)
    start = sum(rows[:sr])
    assert_same(out, reduce_ref(rs, "sum", "float64")[start : start + rows[sr]], "float64")

    a2 = all_inputs((2 * m,), "int16", tag, "a2a", kind="any", ranks=members)
    out = hora.alltoall(a2[sr], name=f"{tag}.a2a", process_set=ps)
    assert_same(out, np.concatenate([x[2 * sr : 2 * sr + 2] for x in a2]), "int16")

    hora.barrier(process_set=ps)


def _check_nonmember_raises(ps: hora.ProcessSet, members: list[int], tag: str) -> None:
    if rank() in members:
        return
    with pytest.raises(ValueError,
                       match=f"allreduce: Rank {rank()} is not a member of the provided process set."):
        hora.allreduce(np.ones(3, np.float32), op=hora.Sum, name=f"{tag}.nonmember", process_set=ps)


def test_global_process_set() -> None:
    """The global set has id 0 and every rank."""
    ps = hora.global_process_set
    assert ps.process_set_id == 0
    _exercise_set(ps, list(range(size())), "ps.global")


def test_static_process_sets() -> None:
    """init(process_sets=[...]) gives ids 1, 2, ... in order; sets run independently."""
    n = size()
    groups = _distinct_subsets(
        [list(range(0, n, 2)), list(range(1, n, 2)), [n - 1], list(range(1, n))]
    )
    hora.shutdown()
    sets = [hora.ProcessSet(g) for g in groups]
    hora.init(process_sets=sets)
    try:
        assert [ps.process_set_id for ps in sets] == list(range(1, len(groups) + 1))
        for i, (ps, members) in enumerate(zip(sets, groups)):
            _exercise_set(ps, members, f"ps.static{i}")
            _check_nonmember_raises(ps, members, f"ps.static{i}")
        check_next_op_works("static-sets")
    finally:
        hora.shutdown()
        hora.init()
    check_next_op_works("static-sets-reinit")


def test_static_process_sets_must_agree() -> None:
    """Ranks that pass different process sets to init fail init on every rank, each rank's
    sets named, instead of hanging (MPI) or running collectives that disagree on membership."""
    n = size()
    me = rank()
    if n < 2:
        pytest.skip("a mismatch needs at least two ranks")
    hora.shutdown()
    try:
        with pytest.raises(ValueError) as info:
            hora.init(process_sets=[hora.ProcessSet([me])])
        message = str(info.value)
        assert "ranks disagree on the process sets given to init" in message, message
        for r in range(n):
            assert f"rank {r} gave [[{r}]]" in message, message
    finally:
        hora.shutdown()
        hora.init()
    check_next_op_works("static-sets-mismatch")


def test_dynamic_process_sets() -> None:
    """add_process_set / remove_process_set after init (HORA_DYNAMIC_PROCESS_SETS=1)."""
    n = size()
    groups = _distinct_subsets([[n - 1], list(range(0, n, 2)), list(range(1, n))])
    sets = [hora.add_process_set(g) for g in groups]
    ids = [ps.process_set_id for ps in sets]
    assert len(set(ids)) == len(ids) and 0 not in ids
    for i, (ps, members) in enumerate(zip(sets, groups)):
        _exercise_set(ps, members, f"ps.dyn{i}")
        _check_nonmember_raises(ps, members, f"ps.dyn{i}")
    check_next_op_works("dynamic-sets")
    for ps, members in zip(sets, groups):
        assert hora.remove_process_set(ps) is True
        assert ps.process_set_id is None and ps.ranks == members
    # A set with the same ranks can be added again after removal, and used; as in Horovod, the
    # ids of removed sets are reused, oldest first, and a removed object keeps its ranks.
    if groups:
        again = hora.add_process_set(groups[0])
        assert again.process_set_id == ids[0]
        _exercise_set(again, groups[0], "ps.dyn.again")
        if len(sets) > 1:
            assert hora.add_process_set(sets[1]) is sets[1]
            assert sets[1].process_set_id == ids[1]
            assert str(sets[1]) == (f"ProcessSet(process_set_id={ids[1]}, ranks={groups[1]}, "
                                    "mpi_comm=None)")
            assert hora.remove_process_set(sets[1]) is True
        assert hora.remove_process_set(again) is True
    check_next_op_works("dynamic-sets-removed")


def test_add_existing_process_set_is_an_error() -> None:
    """A dynamic set with the ranks of an existing set (here the world) is refused everywhere."""
    with pytest.raises((ValueError, hora.HoraError)):
        hora.add_process_set(list(range(size())))
    check_next_op_works("existing-set")


# --------------------------------------------------------------------------------------------
# Grouped ops


def test_grouped_allreduce() -> None:
    """grouped_allreduce over mixed dtypes and shapes returns one result per tensor."""
    specs = [
        ("float32", (17,)),
        ("float32", (3, 4)),
        ("int32", (5,)),
        ("bfloat16", ()),
        ("float64", (0,)),
        ("uint8", (2, 2, 2)),
    ]
    inputs = [all_inputs(shape, dt, "gar", i) for i, (dt, shape) in enumerate(specs)]
    outs = hora.grouped_allreduce([xs[rank()] for xs in inputs], op=hora.Sum, name="gar")
    assert len(outs) == len(specs)
    for (dt, _), xs, out in zip(specs, inputs, outs):
        assert_same(out, reduce_ref(xs, "sum", dt), dt)


def test_grouped_allreduce_inplace_and_async() -> None:
    """grouped_allreduce_ (in place) and grouped_allreduce_async (+ synchronize)."""
    inputs = [all_inputs(100 + i, "float64", "gari", i) for i in range(4)]
    bufs = [xs[rank()].copy() for xs in inputs]
    hora.grouped_allreduce_(bufs, op=hora.Max, name="gari")
    for xs, buf in zip(inputs, bufs):
        assert_same(buf, reduce_ref(xs, "max", "float64"), "float64")
    handle = hora.grouped_allreduce_async(
        [xs[rank()] for xs in inputs], op=hora.Average, name="gara"
    )
    outs = hora.synchronize(handle)
    for xs, out in zip(inputs, outs):
        assert_close(out, reduce_ref(xs, "average", "float64"), "float64")


def test_grouped_allreduce_larger_than_threshold() -> None:
    """A group whose total size exceeds the fusion threshold is split but stays correct."""
    count = big_count("float32") // 3 + 1
    inputs = [all_inputs(count, "float32", "garbig", i) for i in range(5)]
    outs = hora.grouped_allreduce([xs[rank()] for xs in inputs], op=hora.Sum, name="garbig")
    for xs, out in zip(inputs, outs):
        assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")


# --------------------------------------------------------------------------------------------
# Fusion


def test_fusion_many_async_tensors() -> None:
    """200 async allreduces of mixed dtypes, sizes, ops and scales, synchronized out of order."""
    dtypes = ["float32", "int32", "float16", "float64", "bfloat16", "uint8", "int64"]
    ops = ["sum", "average", "max", "sum", "min"]
    cases = []
    for i in range(200):
        dt = dtypes[i % len(dtypes)]
        op = ops[i % len(ops)]
        count = (i * 37) % 700 + (1 if i % 11 else 0)
        pre = 2.0 if i % 13 == 0 and op in ("sum", "average") else 1.0
        xs = all_inputs(count, dt, "fusion", i, kind="any" if op in ("min", "max") else "sum")
        handle = hora.allreduce_async(
            xs[rank()], op=OPS[op], name=f"fusion.{i}", prescale_factor=pre
        )
        cases.append((dt, op, pre, xs, handle))
    order = np.random.default_rng(rank()).permutation(len(cases))  # differs per rank on purpose
    for i in order:
        dt, op, pre, xs, handle = cases[i]
        out = hora.synchronize(handle)
        assert_close(out, reduce_ref(xs, op, dt, pre), dt)


def test_fusion_mixed_collectives_in_flight() -> None:
    """Allreduce, allgather, broadcast, reducescatter and alltoall in flight together."""
    n, r = size(), rank()
    root = n - 1
    ar = [all_inputs(64 + i, "float32", "mix.ar", i) for i in range(10)]
    ag = [make_input(q, (q + 2, 3), "int8", "mix.ag", kind="any") for q in range(n)]
    bc = all_inputs(40, "float64", "mix.bc", kind="any")
    rs = all_inputs((3 * n + 1,), "int32", "mix.rs")
    a2 = all_inputs((3 * n, 2), "uint16", "mix.a2a", kind="any")
    handles = [
        hora.allreduce_async(xs[r], op=hora.Sum, name=f"mix.ar.{i}") for i, xs in enumerate(ar[:5])
    ]
    h_ag = hora.allgather_async(ag[r], name="mix.ag")
    h_bc = hora.broadcast_async(bc[r], root, name="mix.bc")
    handles += [
        hora.allreduce_async(xs[r], op=hora.Sum, name=f"mix.ar.{i + 5}")
        for i, xs in enumerate(ar[5:])
    ]
    h_rs = hora.reducescatter_async(rs[r], op=hora.Sum, name="mix.rs")
    h_a2 = hora.alltoall_async(a2[r], name="mix.a2a")

    a2_out = hora.synchronize(h_a2)
    if isinstance(a2_out, tuple):
        a2_out = a2_out[0]
    assert_same(a2_out, np.concatenate([x[3 * r : 3 * r + 3] for x in a2]), "uint16")
    rows = reducescatter_rows(3 * n + 1, n)
    start = sum(rows[:r])
    assert_same(
        hora.synchronize(h_rs), reduce_ref(rs, "sum", "int32")[start : start + rows[r]], "int32"
    )
    assert_same(hora.synchronize(h_bc), bc[root], "float64")
    assert_same(hora.synchronize(h_ag), np.concatenate(ag), "int8")
    for xs, handle in zip(ar, handles):
        assert_same(hora.synchronize(handle), reduce_ref(xs, "sum", "float32"), "float32")


def test_fused_equals_unfused() -> None:
    """Random floats reduced one at a time and fused in one batch agree."""
    inputs = [all_inputs(200 + 3 * i, "float32", "fuseq", i, kind="normal") for i in range(30)]
    single = [
        hora.allreduce(xs[rank()], op=hora.Sum, name=f"fuseq.single.{i}")
        for i, xs in enumerate(inputs)
    ]
    handles = [
        hora.allreduce_async(xs[rank()], op=hora.Sum, name=f"fuseq.batch.{i}")
        for i, xs in enumerate(inputs)
    ]
    for xs, one, handle in zip(inputs, single, handles):
        batch = hora.synchronize(handle)
        if size() <= 2:  # a + b == b + a: no reordering can change a two-rank sum
            assert_same(batch, one, "float32")
        else:
            assert_close(batch, one, "float32", rtol=1e-5, atol=1e-5)
        assert_close(batch, reduce_ref(xs, "sum", "float32"), "float32", rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Names


def test_name_reuse_with_new_shape_renegotiates() -> None:
    """Reusing a name with a new shape, dtype, op or scale renegotiates instead of failing."""
    plan = [
        ((10,), "float32", "sum", 1.0),
        ((10,), "float32", "sum", 1.0),
        ((10,), "float32", "sum", 1.0),
        ((20,), "float32", "sum", 1.0),
        ((20,), "int32", "sum", 1.0),
        ((20,), "int32", "max", 1.0),
        ((20,), "int32", "max", 1.0),
        ((2, 10), "int32", "max", 1.0),
        ((10,), "float32", "sum", 2.0),
        ((10,), "float32", "sum", 1.0),
        ((0,), "float32", "sum", 1.0),
        ((10,), "float32", "sum", 1.0),
    ]
    for step, (shape, dt, op, pre) in enumerate(plan):
        kind = "any" if op == "max" else "sum"
        xs = all_inputs(shape, dt, "reuse", step, kind=kind)
        out = hora.allreduce(xs[rank()], op=OPS[op], name="reuse", prescale_factor=pre)
        assert_same(out, reduce_ref(xs, op, dt, pre), dt)


def test_same_name_in_different_process_sets() -> None:
    """Names are scoped per process set: one name in flight in two sets at once."""
    n = size()
    groups = _distinct_subsets([list(range(0, n, 2)), list(range(1, n, 2))])
    sets = [hora.add_process_set(g) for g in groups]
    try:
        xs = all_inputs(20, "int32", "scoped")
        h_world = hora.allreduce_async(xs[rank()], op=hora.Sum, name="scoped")
        mine = [(ps, g) for ps, g in zip(sets, groups) if rank() in g]
        h_sets = [
            (
                hora.allreduce_async(xs[rank()], op=hora.Sum, name="scoped", process_set=ps),
                [xs[q] for q in g],
            )
            for ps, g in mine
        ]
        assert_same(hora.synchronize(h_world), reduce_ref(xs, "sum", "int32"), "int32")
        for handle, members_xs in h_sets:
            assert_same(hora.synchronize(handle), reduce_ref(members_xs, "sum", "int32"), "int32")
    finally:
        for ps in sets:
            hora.remove_process_set(ps)


def test_poll_until_done() -> None:
    """poll() turns True without synchronize() being called."""
    xs = all_inputs(1000, "float32", "poll")
    handle = hora.allreduce_async(xs[rank()], op=hora.Sum, name="poll")
    deadline = time.monotonic() + 60
    while not hora.poll(handle):
        assert time.monotonic() < deadline, "poll() never returned True"
        time.sleep(0.001)
    assert_same(hora.synchronize(handle), reduce_ref(xs, "sum", "float32"), "float32")
