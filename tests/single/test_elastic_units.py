"""Elastic mode pieces that need no job: state, sampler, placement, blacklist, discovery output,
protocol and the run loop (with a fake reset)."""

from __future__ import annotations

import random

import pytest
import torch
from hora.common import basics
from hora.common.elastic import ObjectState, protocol, run_fn
from hora.errors import HoraError, HostsUpdatedInterrupt
from hora.runner.elastic.blacklist import Blacklist
from hora.runner.elastic.discovery import parse_discovery_output
from hora.runner.elastic.placement import Coordinates, place
from hora.torch.elastic import ElasticSampler


def identity_state(**kwargs: object) -> ObjectState:
    return ObjectState(lambda obj: obj, lambda: 0, **kwargs)


def test_object_state_commit_restore_and_attributes():
    state = identity_state(epoch=0, values=[1, 2])
    state.epoch = 3
    state.values.append(3)
    state.save()
    state.epoch = 9
    state.values.append(99)
    state.restore()
    assert state.epoch == 3 and state.values == [1, 2, 3]
    state.values.append(4)  # restore hands out copies: the commit itself is untouched
    state.restore()
    assert state.values == [1, 2, 3]


def test_object_state_sync_takes_the_broadcast_value():
    state = ObjectState(lambda obj: {**obj, "epoch": 7}, lambda: 1, epoch=0)
    state.sync()
    assert state.epoch == 7
    state.restore()
    assert state.epoch == 7


def test_reset_callbacks_run_in_order_after_reset():
    calls: list[str] = []
    state = identity_state(x=1)
    state.reset = lambda: calls.append("reset")  # type: ignore[method-assign]
    state.register_reset_callbacks([lambda: calls.append("a"), lambda: calls.append("b")])
    state.on_reset()
    assert calls == ["reset", "a", "b"]


def test_run_fn_restores_after_a_failed_collective_and_keeps_state_on_host_update():
    state = identity_state(step=0)
    resets: list[int] = []
    attempts: list[int] = []

    def train(st: ObjectState) -> int:
        attempts.append(st.step)
        st.step += 1
        if len(attempts) == 1:
            st.save()
            st.step += 5  # uncommitted work, lost by the failure below
            raise HoraError("rank 2 died")
        if len(attempts) == 2:
            st.save()
            raise HostsUpdatedInterrupt(skip_sync=False)
        return st.step

    wrapped = run_fn(train, lambda: resets.append(1))
    assert wrapped(state) == 3
    assert attempts == [0, 1, 2]
    assert len(resets) == 2


def test_check_host_updates_raises_only_when_a_newer_generation_is_published(monkeypatch):
    from hora.common.elastic import worker

    state = identity_state(x=1)
    monkeypatch.setattr(worker, "current_generation", lambda: 3)
    monkeypatch.setattr(worker, "published_generation", lambda: 3)
    state.check_host_updates()
    monkeypatch.setattr(worker, "published_generation", lambda: 4)
    with pytest.raises(HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is False


def fake_job(monkeypatch: pytest.MonkeyPatch, rank: int, size: int) -> None:
    monkeypatch.setattr(basics, "is_initialized", lambda: True)
    monkeypatch.setattr(basics, "rank", lambda: rank)
    monkeypatch.setattr(basics, "size", lambda: size)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [0, 1, 7, 12])
def test_sampler_partitions_every_index_once_per_epoch(monkeypatch, size, length):
    seen: list[int] = []
    for rank in range(size):
        fake_job(monkeypatch, rank, size)
        sampler = ElasticSampler(list(range(length)), shuffle=True, seed=3)
        part = list(sampler)
        assert len(part) == len(sampler) == -(-length // size)
        seen += part
    assert set(seen) == set(range(length))


def test_sampler_repartitions_only_unprocessed_samples_after_a_resize(monkeypatch):
    data = list(range(20))
    fake_job(monkeypatch, 0, 2)
    sampler = ElasticSampler(data, shuffle=True, seed=1)
    order = list(range(20))
    random.Random(1).shuffle(order)
    sampler.record_batch(0, 3)  # 3 samples on each of 2 ranks
    state = sampler.state_dict()
    assert state == {"epoch": 0, "processed_num": 6}
    rest: list[int] = []
    for rank in range(3):
        fake_job(monkeypatch, rank, 3)
        resized = ElasticSampler(data, shuffle=True, seed=1)
        resized.load_state_dict(state)
        rest += list(resized)
    assert set(rest) == set(order[6:])
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and sampler.epoch == 1


def test_sampler_without_shuffle_and_before_init_is_the_whole_dataset_in_order():
    assert list(ElasticSampler(range(5), shuffle=False)) == [0, 1, 2, 3, 4]


def test_torch_state_restores_model_optimizer_and_plain_attributes():
    from hora.torch.elastic import TorchState

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = TorchState(model, optimizer, epoch=1)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    state.epoch = 2
    state.restore()
    assert state.epoch == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.state_dict()["state"] == {}
    optimizer.step()
    state.commit_like = None  # a new plain attribute is just an attribute
    state.save()
    after = [p.detach().clone() for p in model.parameters()]
    model.weight.data.zero_()
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(after, model.parameters()))


def test_placement_makes_the_oldest_worker_rank_0_and_hosts_contiguous():
    coords = place([(5, "b"), (2, "a"), (7, "a"), (3, "b"), (9, "c")])
    assert coords[2] == Coordinates(0, 5, 0, 2, 0, 3)
    assert coords[7] == Coordinates(1, 5, 1, 2, 0, 2)
    assert coords[3] == Coordinates(2, 5, 0, 2, 1, 3)
    assert coords[5] == Coordinates(3, 5, 1, 2, 1, 2)
    assert coords[9] == Coordinates(4, 5, 0, 1, 2, 3)
    with pytest.raises(ValueError):
        place([])
    with pytest.raises(ValueError):
        place([(1, "a"), (1, "b")])


def test_blacklist_cooldown_doubles_and_ends():
    now = [100.0]
    bl = Blacklist((2.0, 2.0), clock=lambda: now[0])
    assert bl.usable("h")
    assert bl.record_failure("h") == 2.0
    assert not bl.usable("h")
    now[0] += 2.0
    assert bl.usable("h")
    assert bl.record_failure("h") == 4.0 and bl.failures("h") == 2
    forever = Blacklist(None, clock=lambda: now[0])
    assert forever.record_failure("h") is None
    now[0] += 1e9
    assert not forever.usable("h")


def test_discovery_output_parsing():
    text = "# hosts\nnode1:4\n\nnode2\n 10.0.0.3:2 \n"
    assert parse_discovery_output(text, 3) == {"node1": 4, "node2": 3, "10.0.0.3": 2}
    assert parse_discovery_output("node2\n", None) == {"node2": 1}
    with pytest.raises(ValueError):
        parse_discovery_output("a:1\na:2\n", None)
    with pytest.raises(ValueError):
        parse_discovery_output("a:x\n", None)


def test_discovery_script_failures_keep_the_last_good_list(tmp_path):
    from hora.runner.elastic.discovery import ScriptHosts

    out = tmp_path / "hosts"
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {out}\n")
    script.chmod(0o755)
    said: list[str] = []
    hosts = ScriptHosts(str(script), 2, said.append)
    out.write_text("a:1\nb\n")
    assert hosts.find() == {"a": 1, "b": 2}
    out.write_text("a:x\n")
    assert hosts.find() == {"a": 1, "b": 2}
    assert len(said) == 1 and "keeping the last list of hosts" in said[0]
    out.unlink()  # cat fails
    assert hosts.find() == {"a": 1, "b": 2}
    out.write_text("c:3\n")
    assert hosts.find() == {"c": 3}


def test_generation_secrets_differ_per_generation_and_job():
    a0 = protocol.generation_secret("job", 0)
    assert a0 == protocol.generation_secret("job", 0)
    assert a0 != protocol.generation_secret("job", 1)
    assert a0 != protocol.generation_secret("other", 0)
    place_of = protocol.Assignment(1, 3, 1, 3, 0, 1, 4242)
    assert protocol.Assignment.decode(place_of.encode()) == place_of
    with pytest.raises(ValueError):
        protocol.Assignment.decode(b"{}")
