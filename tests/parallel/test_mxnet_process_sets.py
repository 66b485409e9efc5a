"""hora.mxnet DistributedOptimizer and DistributedTrainer restricted to a process set.

Ranks of the set average their gradients; a rank outside it updates with its own gradient and
makes no collective call (as Horovod does), so the job goes on to its next collective together.
Run under ``horarun -np N`` (1 to 4 ranks) with a Python that has MXNet 1.9.1.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
os.environ.setdefault("HORA_DYNAMIC_PROCESS_SETS", "1")

import numpy as np
import pytest
from conftest import rank, size

hvd = pytest.importorskip("hora.mxnet", exc_type=ImportError)
mx = pytest.importorskip("mxnet")

SHAPE = (4, 3)


def _even_set() -> object:
    """The even ranks; at one rank that is the global set, which needs no registration."""
    hvd.init()
    if size() == 1:
        return hvd.global_process_set
    return hvd.add_process_set([r for r in range(size()) if r % 2 == 0])


def _remove(process_set: object) -> None:
    if size() > 1:
        hvd.remove_process_set(process_set)


def _expected(lr: float, members: list[int]) -> np.ndarray:
    """Weights after one SGD step from zeros, each rank's gradient being rank + 1 everywhere and
    rescale_grad being 1 / len(members) on every rank."""
    scale = 1.0 / len(members)
    grad = sum(r + 1 for r in members) if rank() in members else rank() + 1
    return np.full(SHAPE, -lr * grad * scale, dtype=np.float32)


@pytest.mark.parametrize("num_groups", [0, 1])
def test_optimizer_outside_the_set_updates_alone(num_groups: int) -> None:
    even = _even_set()
    try:
        opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.5), num_groups=num_groups,
                                       process_set=even)
        w = mx.nd.zeros(SHAPE)
        g = mx.nd.full(SHAPE, rank() + 1.0)
        opt.update(0, w, g, opt.create_state(0, w))
        np.testing.assert_allclose(w.asnumpy(), _expected(0.5, even.ranks), rtol=1e-6)
        # Every rank reaches the next global collective: nothing is left waiting in the set.
        total = hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name=f"ps.opt.after.{num_groups}")
        assert total.asscalar() == size()
    finally:
        _remove(even)


def test_trainer_outside_the_set_updates_alone() -> None:
    even = _even_set()
    try:
        param = mx.gluon.Parameter("ps_w", shape=SHAPE, init=mx.init.Zero())
        param.initialize(ctx=mx.cpu())
        trainer = hvd.DistributedTrainer([param], "sgd", {"learning_rate": 0.5},
                                         process_set=even)
        with mx.autograd.record():
            loss = (param.data() * (rank() + 1.0)).sum()
        loss.backward()  # the gradient is rank + 1 everywhere
        trainer.step(1)
        np.testing.assert_allclose(param.data().asnumpy(), _expected(0.5, even.ranks), rtol=1e-6)
        total = hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name="ps.trainer.after")
        assert total.asscalar() == size()
    finally:
        _remove(even)
