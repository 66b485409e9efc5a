"""Point-to-point messages of the ``hora`` torch.distributed backend: send/recv, isend/irecv,
recv from any rank, batch_isend_irecv, ordering and tags, subgroups, errors and timeouts, and
monitored_barrier with gloo's messages."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from conftest import DTYPES, SIZES, all_inputs, assert_same, rank, resolve_count, size
from hora.errors import HoraTimeoutError
from torch_helpers import TORCH_DTYPES, to_numpy, to_torch


@pytest.fixture(scope="module", autouse=True)
def hora_default_group() -> Iterator[None]:
    if size() < 2:
        pytest.skip("point-to-point needs two ranks")
    dist.init_process_group(backend="hora")
    yield
    dist.destroy_process_group()


def right() -> int:
    return (rank() + 1) % size()


def left() -> int:
    return (rank() - 1) % size()


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_isend_irecv_pass_every_dtype_around_the_ring(dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs((n, 3), dtype, "p2p_ring", kind="any")
    out = torch.empty((n, 3), dtype=TORCH_DTYPES[dtype])
    sent = dist.isend(to_torch(xs[rank()]), dst=right(), tag=100)
    received = dist.irecv(out, src=left(), tag=100)
    sent.wait()
    received.wait()
    assert_same(to_numpy(out), xs[left()], dtype)


def test_blocking_send_and_recv_into_a_non_contiguous_tensor() -> None:
    if rank() == 0:
        dist.send(torch.arange(12.0).reshape(3, 4), dst=1, tag=101)
    elif rank() == 1:
        target = torch.zeros(4, 3).t()  # a transposed view
        assert dist.recv(target, src=0, tag=101) == 0
        assert torch.equal(target, torch.arange(12.0).reshape(3, 4))


def test_recv_from_any_rank_tells_the_sender() -> None:
    if rank() == 0:
        senders = set()
        for _ in range(size() - 1):
            value = torch.empty(1, dtype=torch.int64)
            src = dist.recv(value, tag=102)
            assert value.item() == src * 10
            senders.add(src)
        assert senders == set(range(1, size()))
    else:
        dist.send(torch.tensor([rank() * 10]), dst=0, tag=102)
    dist.barrier()


def test_messages_with_one_tag_arrive_in_the_order_they_were_sent() -> None:
    if rank() == 0:
        works = [dist.isend(torch.tensor([float(i)]), dst=1, tag=5) for i in range(60)]
        for work in works:
            work.wait()
    elif rank() == 1:
        outs = [torch.empty(1) for _ in range(60)]
        works = [dist.irecv(out, src=0, tag=5) for out in outs]
        for work in works:
            work.wait()
        assert [out.item() for out in outs] == [float(i) for i in range(60)]


def test_receives_match_by_tag_not_by_arrival() -> None:
    if rank() == 0:
        dist.send(torch.tensor([1.0]), dst=1, tag=1)
        dist.send(torch.tensor([2.0]), dst=1, tag=2)
    elif rank() == 1:
        second, first = torch.empty(1), torch.empty(1)
        dist.recv(second, src=0, tag=2)
        dist.recv(first, src=0, tag=1)
        assert (first.item(), second.item()) == (1.0, 2.0)


def test_batch_isend_irecv_exchanges_with_both_neighbours() -> None:
    to_right, to_left = torch.full((5,), float(rank())), torch.full((5,), -float(rank()))
    from_left, from_right = torch.empty(5), torch.empty(5)
    ops = [dist.P2POp(dist.irecv, from_left, left(), tag=103),
           dist.P2POp(dist.isend, to_right, right(), tag=103),
           dist.P2POp(dist.isend, to_left, left(), tag=103),
           dist.P2POp(dist.irecv, from_right, right(), tag=103)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    # With two ranks both neighbours are one rank: its two messages match in issue order.
    assert from_left[0].item() == left() and from_right[0].item() == -right()


def test_a_tag_belongs_to_its_group() -> None:
    """The same tag in the default group and in a subgroup of the same ranks never mixes."""
    sub = dist.new_group(list(range(size())))
    if rank() == 0:
        dist.send(torch.tensor([1.0]), dst=1, tag=3, group=sub)
        dist.send(torch.tensor([2.0]), dst=1, tag=3)
    elif rank() == 1:
        world, mine = torch.empty(1), torch.empty(1)
        dist.recv(world, src=0, tag=3)
        dist.recv(mine, src=0, tag=3, group=sub)
        assert (world.item(), mine.item()) == (2.0, 1.0)
    dist.barrier()


def test_subgroup_ranks_address_subgroup_members() -> None:
    members = list(range(1, size()))
    sub = dist.new_group(members)
    if size() < 3 or rank() not in members:
        return
    me = members.index(rank())
    other = (me + 1) % len(members)
    out = torch.empty(2)
    sent = dist.isend(torch.full((2,), float(rank())), group_dst=other, group=sub, tag=104)
    dist.recv(out, group_src=(me - 1) % len(members), group=sub, tag=104)
    sent.wait()
    assert out[0].item() == members[(me - 1) % len(members)]


def test_a_receive_of_the_wrong_size_fails_and_the_pair_goes_on() -> None:
    if rank() == 0:
        dist.send(torch.ones(4), dst=1, tag=105)
        dist.send(torch.full((3,), 2.0), dst=1, tag=105)
    elif rank() == 1:
        with pytest.raises(ValueError, match="has 16 bytes but the receive buffer has 12 bytes"):
            dist.recv(torch.empty(3), src=0, tag=105)
        out = torch.empty(3)
        dist.recv(out, src=0, tag=105)
        assert out.tolist() == [2.0, 2.0, 2.0]


def test_a_receive_nobody_answers_times_out_with_torch_s_words() -> None:
    short = dist.new_group(list(range(size())), timeout=datetime.timedelta(seconds=1))
    if rank() == 1:
        start = time.monotonic()
        with pytest.raises(HoraTimeoutError, match=" (Timed out|timed out|timeout) "):
            dist.recv(torch.empty(1), src=0, group=short, tag=106)
        assert time.monotonic() - start < 10
    dist.barrier()


def test_monitored_barrier_passes_when_every_rank_arrives() -> None:
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)
    group = dist.new_group(list(range(size())))
    group.monitored_barrier(datetime.timedelta(seconds=30))


def test_monitored_barrier_on_a_gloo_group_is_still_torch_s() -> None:
    gloo = dist.new_group(list(range(size())), backend="gloo")
    dist.monitored_barrier(gloo, datetime.timedelta(seconds=30), wait_all_ranks=True)
    if rank() == 0:  # gloo's own words, from gloo's own implementation
        with pytest.raises(RuntimeError, match="Rank 1 failed to pass monitoredBarrier"):
            dist.monitored_barrier(gloo, datetime.timedelta(seconds=0.5))
    dist.barrier()


def test_monitored_barrier_names_the_rank_that_did_not_arrive() -> None:
    group = dist.new_group(list(range(size())))
    timeout = datetime.timedelta(seconds=1)
    if rank() == 0:
        with pytest.raises(RuntimeError, match="Rank 1 failed to pass monitoredBarrier in 1000 ms"):
            dist.monitored_barrier(group, timeout)
    elif rank() > 1:
        with pytest.raises(RuntimeError, match=f"Rank {rank()} successfully reached "
                                               "monitoredBarrier, but received errors"):
            dist.monitored_barrier(group, timeout)
    dist.barrier()


def test_monitored_barrier_with_wait_all_ranks_names_every_missing_rank() -> None:
    group = dist.new_group(list(range(size())))
    if rank() == 0:
        missing = ", ".join(str(r) for r in range(1, size()))
        with pytest.raises(RuntimeError, match=f"Ranks {missing} failed to pass monitoredBarrier"):
            dist.monitored_barrier(group, datetime.timedelta(seconds=0.2), wait_all_ranks=True)
    dist.barrier()


def test_monitored_barrier_of_rank_0_with_no_time_left_times_out_at_once() -> None:
    group = dist.new_group(list(range(size())))
    if rank() == 0:
        with pytest.raises(RuntimeError, match="Rank 0 timed out in monitoredBarrier"):
            group.monitored_barrier(datetime.timedelta(seconds=0))
    dist.barrier()
