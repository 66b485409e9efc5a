"""Elastic state for MXNet Gluon on N ranks (a fixed job: no worker comes or goes).

Run as ``horarun -np N python -m pytest -q tests/parallel/test_mxnet_elastic.py``. Each rank
starts from its own parameters and optimizer states; ``sync()`` must give every rank rank 0's,
``restore()`` the last commit, and ``hvd.elastic.run`` must restore, re-initialise and retry
after a failed collective.
"""

from __future__ import annotations

import os

os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

import numpy as np
import pytest
from conftest import rank, size
from hora.errors import TransportError

hvd = pytest.importorskip("hora.mxnet", exc_type=ImportError)
mx = pytest.importorskip("mxnet")


def build(seed: int, prefix: str) -> tuple[object, object]:
    net = mx.gluon.nn.Dense(2, in_units=3, prefix=prefix)
    net.initialize(mx.init.Constant(float(seed)))
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd",
                               {"learning_rate": 0.1, "momentum": 0.9}, kvstore=None)
    with mx.autograd.record():
        loss = net(mx.nd.ones((4, 3)) * (seed + 1)).sum()
    loss.backward()
    trainer.step(4)  # momentum states now differ per rank
    return net, trainer


def arrays(net: object) -> list[np.ndarray]:
    return [p.data().asnumpy() for _, p in sorted(net.collect_params().items())]


def momenta(trainer: object) -> list[np.ndarray]:
    states = trainer._updaters[0].states
    return [states[k].asnumpy() for k in sorted(states)]


def test_sync_gives_every_rank_rank_0s_parameters_and_optimizer_states():
    net, trainer = build(rank(), "sync_")
    reference_net, reference_trainer = build(0, "ref_")
    state = hvd.elastic.MXNetState(net, trainer, epoch=rank())
    state.sync()
    assert state.epoch == 0
    for got, want in zip(arrays(net), arrays(reference_net)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(momenta(trainer), momenta(reference_trainer)):
        np.testing.assert_array_equal(got, want)


def test_restore_goes_back_to_the_last_commit():
    net, trainer = build(1, "restore_")
    state = hvd.elastic.MXNetState(net.collect_params(), trainer, batch=0)
    state.batch = 3
    state.commit()
    committed, committed_momenta = arrays(net), momenta(trainer)
    with mx.autograd.record():
        loss = net(mx.nd.ones((4, 3))).sum()
    loss.backward()
    trainer.step(4)
    state.batch = 7
    state.restore()
    assert state.batch == 3
    for got, want in zip(arrays(net), committed):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(momenta(trainer), committed_momenta):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError):
        hvd.elastic.MXNetState([1, 2])


def test_run_restores_reinitialises_and_retries_after_a_failed_collective():
    net, trainer = build(0, "run_")
    state = hvd.elastic.MXNetState(net, trainer, attempts=0)
    committed: list[list[np.ndarray]] = []

    @hvd.elastic.run
    def train(st: object) -> float:
        st.attempts += 1
        st.commit()
        committed.append(arrays(net))
        if st.attempts == 1:
            for p in net.collect_params().values():
                p.set_data(p.data() + 100)  # uncommitted: lost by the failure
            raise TransportError("rank 1: connection closed")
        total = hvd.allreduce(mx.nd.array([1.0]), op=hvd.Sum, name="elastic.retry")
        return float(total.asnumpy()[0])

    assert train(state) == float(size())
    assert state.attempts == 2
    for got, want in zip(arrays(net), committed[0]):
        np.testing.assert_array_equal(got, want)
