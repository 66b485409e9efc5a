"""The ``hora`` torch.distributed backend: init with no argument, every collective against a
NumPy reference (every dtype, sizes 0, 1, odd, not divisible by the rank count, big), async works
and futures, new_group as a Hora process set, and clear errors for what it does not provide."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any

import hora
import hora.torch
import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import (
    DTYPES,
    SIZES,
    all_inputs,
    assert_close,
    assert_same,
    kind_for_op,
    rank,
    reduce_ref,
    resolve_count,
    size,
)
from hora.errors import NotSupportedError
from torch_helpers import DIST_OPS, check_reduction, to_numpy, to_torch


@pytest.fixture(scope="module", autouse=True)
def hora_default_group() -> Iterator[None]:
    """``init_process_group(backend="hora")`` with no other argument, as a user writes it."""
    dist.init_process_group(backend="hora")
    yield
    dist.destroy_process_group()



def test_init_without_arguments() -> None:
    assert dist.get_backend() == "hora"
    assert dist.get_rank() == hora.rank()
    assert dist.get_world_size() == hora.size()


@pytest.mark.parametrize("attach", ["then", "add_done_callback"])
def test_callbacks_run_in_another_order_on_each_rank_still_meet(attach: str) -> None:
    """Two complete works' callbacks each start an allreduce of one shape; ranks attach them in
    opposite orders, so they start them in opposite orders (a completed future runs a callback
    as it is attached). Each callback's allreduce must meet the same callback's on the other
    ranks, never the one that happens to come at the same position."""
    works = [dist.all_reduce(torch.zeros(1), async_op=True) for _ in range(2)]
    for work in works:
        work.get_future().wait()
    started: dict[int, dist.Work] = {}
    values: dict[int, torch.Tensor] = {}

    def start(which: int) -> Callable[[Any], Any]:
        def callback(_: Any) -> None:
            values[which] = torch.full([8], float((which + 1) * (rank() + 1)))
            started[which] = dist.all_reduce(values[which], async_op=True)
        return callback

    order = [0, 1] if rank() % 2 == 0 else [1, 0]
    for which in order:
        future = works[which].get_future()
        getattr(future, attach)(start(which))
    for which in order:
        started[which].wait()
    ranks_sum = size() * (size() + 1) / 2
    for which in (0, 1):
        assert torch.equal(values[which], torch.full([8], (which + 1) * ranks_sum)), which


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(DIST_OPS))
def test_all_reduce(op: str, dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "dist_all_reduce", op, kind=kind_for_op(op))
    tensor = to_torch(xs[rank()])
    dist.all_reduce(tensor, op=DIST_OPS[op])
    check_reduction(tensor, reduce_ref(xs, op, dtype), dtype, op)


def test_all_reduce_non_contiguous_and_premul_sum() -> None:
    xs = all_inputs((6, 4), "float64", "dist_noncontig")
    tensor = to_torch(xs[rank()]).t()
    dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(0.5))
    assert_close(to_numpy(tensor), reduce_ref(xs, "sum", "float64").T * 0.5, "float64")


def test_async_work_and_future() -> None:
    xs = all_inputs(1001, "float32", "dist_async")
    tensor = to_torch(xs[rank()])
    work = dist.all_reduce(tensor, async_op=True)
    doubled = work.get_future().then(lambda fut: fut.value()[0] * 2)
    assert work.wait() is True
    assert work.is_completed()
    expected = reduce_ref(xs, "sum", "float32")
    assert_same(to_numpy(tensor), expected, "float32")
    assert_same(to_numpy(doubled.wait()), expected * 2, "float32")


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "dist_broadcast", kind="any")
    for root in {0, size() - 1}:
        tensor = to_torch(xs[rank()])
        dist.broadcast(tensor, src=root)
        assert_same(to_numpy(tensor), xs[root], dtype)


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs((n, 2), dtype, "dist_all_gather", kind="any")
    outputs = [torch.empty((n, 2), dtype=to_torch(xs[0]).dtype) for _ in range(size())]
    dist.all_gather(outputs, to_torch(xs[rank()]))
    for out, x in zip(outputs, xs):
        assert_same(to_numpy(out), x, dtype)


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather_into_tensor(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "dist_all_gather_into", kind="any")
    out = torch.empty(n * size(), dtype=to_torch(xs[0]).dtype)
    dist.all_gather_into_tensor(out, to_torch(xs[rank()]))
    assert_same(to_numpy(out), np.concatenate(xs), dtype)


# Every dtype with SUM; the other ops (MIN, MAX, PRODUCT run as an allreduce) on three dtypes.
REDUCE_SCATTER_CASES = [("sum", d) for d in DTYPES] + [
    (op, d) for op in DIST_OPS if op != "sum" for d in ("int32", "bfloat16", "float64")
]


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize(("op", "dtype"), REDUCE_SCATTER_CASES)
def test_reduce_scatter_tensor(op: str, dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n * size(), dtype, "dist_reduce_scatter", op, kind=kind_for_op(op))
    out = torch.empty(n, dtype=to_torch(xs[0]).dtype)
    dist.reduce_scatter_tensor(out, to_torch(xs[rank()]), op=DIST_OPS[op])
    expected = reduce_ref(xs, op, dtype)[rank() * n:(rank() + 1) * n]
    check_reduction(out, expected, dtype, op)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_reduce_scatter_list(dtype: str) -> None:
    xs = all_inputs((size(), 17), dtype, "dist_reduce_scatter_list")
    out = torch.empty(17, dtype=to_torch(xs[0]).dtype)
    dist.reduce_scatter(out, list(to_torch(xs[rank()]).unbind(0)))
    check_reduction(out, reduce_ref(xs, "sum", dtype)[rank()], dtype)


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all_single_equal(dtype: str, count: int | str) -> None:
    rows = resolve_count(count, dtype)
    xs = all_inputs((rows * size(), 3), dtype, "dist_a2a", kind="any")
    out = torch.empty((rows * size(), 3), dtype=to_torch(xs[0]).dtype)
    dist.all_to_all_single(out, to_torch(xs[rank()]))
    expected = np.concatenate([x[rank() * rows:(rank() + 1) * rows] for x in xs])
    assert_same(to_numpy(out), expected, dtype)


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "float64"])
def test_all_to_all_single_uneven(dtype: str) -> None:
    def splits_of(r: int) -> list[int]:
        return [(r + d) % 3 for d in range(size())]  # rows rank r sends to rank d, zeros too

    xs = [all_inputs((sum(splits_of(r)), 2), dtype, "dist_a2a_uneven", kind="any")[r]
          for r in range(size())]
    received = [splits_of(r)[rank()] for r in range(size())]
    out = torch.empty((sum(received), 2), dtype=to_torch(xs[0]).dtype)
    dist.all_to_all_single(out, to_torch(xs[rank()]), output_split_sizes=received,
                           input_split_sizes=splits_of(rank()))
    parts = []
    for r in range(size()):
        start = sum(splits_of(r)[:rank()])
        parts.append(xs[r][start:start + splits_of(r)[rank()]])
    assert_same(to_numpy(out), np.concatenate(parts), dtype)


def test_barrier() -> None:
    dist.barrier()
    work = dist.barrier(async_op=True)
    assert work.wait()


def test_new_group_is_a_process_set() -> None:
    members = list(range(1, size()))
    group = dist.new_group(members)
    if rank() not in members:
        assert group == dist.GroupMember.NON_GROUP_MEMBER
        return
    assert dist.get_backend(group) == "hora"
    assert dist.get_world_size(group) == len(members)
    xs = all_inputs(33, "int64", "dist_new_group")
    tensor = to_torch(xs[rank()])
    dist.all_reduce(tensor, group=group)
    assert_same(to_numpy(tensor), reduce_ref([xs[r] for r in members], "sum", "int64"), "int64")
    root = members[-1]
    value = torch.tensor([float(rank())])
    dist.broadcast(value, src=root, group=group)
    assert value.item() == root


def test_tensors_off_the_cpu_and_wrong_shapes_fail_clearly() -> None:
    with pytest.raises(NotSupportedError, match="runs CPU tensors only"):
        dist.all_reduce(torch.ones(1, device="meta"))
    with pytest.raises(ValueError, match="all_gather_into_tensor needs an output"):
        dist.all_gather_into_tensor(torch.empty(1), torch.ones(1))


def test_a_barrier_only_one_rank_reaches_times_out_with_torch_s_words() -> None:
    """torch's callers (its own tests among them) look for ' Timed out ' or ' timeout ' in a
    timeout's message; the barrier fails after the group's timeout, not before."""
    short = dist.new_group(list(range(size())), timeout=datetime.timedelta(seconds=1))
    if rank() == 0:
        start = time.monotonic()
        with pytest.raises(hora.HoraTimeoutError, match=" (Timed out|timeout) "):
            dist.barrier(group=short)
        assert 0.9 <= time.monotonic() - start < 10
    else:
        time.sleep(1.5)  # rank 0's barrier has timed out by now
        dist.barrier(group=short)
    dist.barrier(group=short)  # rank 0's timed-out barrier met the others' first one


def test_a_barrier_s_own_timeout_wins_over_the_group_s() -> None:
    if rank() == 0:
        with pytest.raises(hora.HoraTimeoutError, match="Timed out waiting 300ms"):
            dist.barrier(timeout=datetime.timedelta(seconds=0.3))
    else:
        time.sleep(0.6)
        dist.barrier()
    dist.barrier()


def test_a_subgroup_can_be_destroyed_and_the_job_goes_on() -> None:
    members = list(range(size() - 1)) or [0]
    group = dist.new_group(members)
    if rank() in members:
        assert group.group_name
        tensor = torch.ones(2)
        dist.all_reduce(tensor, group=group)
        assert tensor.tolist() == [float(len(members))] * 2
    dist.destroy_process_group(group)
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    assert tensor.item() == size()


def test_list_collectives_check_their_lists() -> None:
    with pytest.raises(ValueError, match=f"all_gather takes one list of {size()} outputs"):
        dist.all_gather([torch.empty(1) for _ in range(size() + 1)], torch.ones(1))
    with pytest.raises(ValueError, match="all_gather outputs must match the input's size"):
        dist.all_gather([torch.empty(2) for _ in range(size())], torch.ones(1))
    with pytest.raises(ValueError, match=f"reduce_scatter takes one list of {size()} inputs"):
        dist.reduce_scatter(torch.empty(1), [torch.ones(1) for _ in range(size() + 1)])
    with pytest.raises(ValueError, match="reduce_scatter inputs must match the output's size and "
                                         "dtype"):
        dist.reduce_scatter(torch.empty(1), [torch.ones(2) for _ in range(size())])


def test_work_wait_timeout_is_bounded() -> None:
    """A collective that only this rank joins times out with a clear error, then the job goes
    on once every rank joins it."""
    tensor = torch.ones(3)
    if rank() == 0:
        work = dist.all_reduce(tensor, async_op=True)
        with pytest.raises(hora.HoraError, match="Timed out waiting 200ms"):
            work.wait(datetime.timedelta(seconds=0.2))
    else:
        time.sleep(1.0)  # rank 0's 0.2 s wait ends first
        work = dist.all_reduce(tensor, async_op=True)
    work.wait()
    assert tensor.tolist() == [float(size())] * 3
