"""Training with hora.mxnet: DistributedTrainer, DistributedOptimizer and broadcast_parameters.

Every rank trains on its shard of a global batch; the result must equal training in one process
on the whole batch, which every rank also runs locally as the reference. Run under
``horarun -np N`` (2 to 4 ranks) with a Python that has MXNet 1.9.1.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")

import hora
import numpy as np
import pytest
from conftest import rank, seed_of, size

hvd = pytest.importorskip("hora.mxnet", exc_type=ImportError)
mx = pytest.importorskip("mxnet")

IN_UNITS, HIDDEN, OUT_UNITS = 5, 7, 3
BATCH = 3  # rows per rank and step
STEPS = 3
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}


# ------------------------------------------------------------------------------------- helpers


def build_net(prefix: str, dtype: str = "float64", hidden: int = HIDDEN,
              deferred: bool = False, ctx: list | None = None) -> mx.gluon.HybridBlock:
    """A two-layer perceptron whose initial weights depend only on ``prefix``-free names."""
    net = mx.gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(hidden, in_units=0 if deferred else IN_UNITS,
                                  activation="tanh", dtype=dtype))
        net.add(mx.gluon.nn.Dense(OUT_UNITS, in_units=0 if deferred else hidden, dtype=dtype))
    net.initialize(mx.init.Zero(), ctx=ctx or mx.cpu())
    if not deferred:
        set_weights(net, "init")
    return net


def suffix(name: str, prefix: str) -> str:
    """The parameter name without the network prefix."""
    return name.removeprefix(prefix)


def set_weights(net: mx.gluon.HybridBlock, key: object) -> None:
    """Deterministic weights from the parameter's name (without prefix) and ``key``."""
    for name, param in net.collect_params().items():
        rng = np.random.default_rng(seed_of("weights", suffix(name, net.prefix), key))
        value = rng.standard_normal(param.shape) * 0.5
        param.set_data(mx.nd.array(value, dtype=param.dtype))


def weights(net: mx.gluon.HybridBlock) -> dict[str, np.ndarray]:
    """Parameter values by name without prefix."""
    return {suffix(n, net.prefix): p.data().asnumpy() for n, p in net.collect_params().items()}


def global_batch(step: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The whole batch of one step, ``size() * BATCH`` rows."""
    rng = np.random.default_rng(seed_of("batch", step))
    x = rng.standard_normal((size() * BATCH, IN_UNITS)).astype(dtype)
    y = rng.standard_normal((size() * BATCH, OUT_UNITS)).astype(dtype)
    return x, y


def shard(array: np.ndarray) -> np.ndarray:
    """This rank's rows of a global batch."""
    return array[rank() * BATCH:(rank() + 1) * BATCH]


def backward(net: mx.gluon.HybridBlock, x: np.ndarray, y: np.ndarray) -> None:
    """Forward and backward pass of the L2 loss (summed over the rows) on ``x``, ``y``."""
    loss_fn = mx.gluon.loss.L2Loss()
    data = mx.nd.array(x, dtype=x.dtype)
    label = mx.nd.array(y, dtype=y.dtype)
    with mx.autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()


def train(net: mx.gluon.HybridBlock, trainer: mx.gluon.Trainer, dtype: str, distributed: bool,
          steps: int = STEPS) -> None:
    """``steps`` steps on the global batches: this rank's shard, or all of it."""
    for step in range(steps):
        x, y = global_batch(step, dtype)
        if distributed:
            backward(net, shard(x), shard(y))
            trainer.step(BATCH)
        else:
            backward(net, x, y)
            trainer.step(size() * BATCH)


def reference(optimizer: str, params: dict, dtype: str = "float64",
              frozen: tuple[str, ...] = (), steps: int = STEPS) -> dict[str, np.ndarray]:
    """Weights after training in one process on the global batches."""
    net = build_net("ref_", dtype)
    for name, param in net.collect_params().items():
        if suffix(name, "ref_") in frozen:
            param.grad_req = "null"
    trainer = mx.gluon.Trainer(net.collect_params(), optimizer, dict(params), kvstore=None)
    train(net, trainer, dtype, distributed=False, steps=steps)
    return weights(net)


def assert_weights_close(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray],
                         dtype: str, rtol: float | None = None) -> None:
    """Same parameter names, and values equal within the tolerance of ``dtype``."""
    assert sorted(actual) == sorted(expected)
    tol = TOLERANCE[dtype] if rtol is None else rtol
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=tol, atol=tol,
                                   err_msg=f"parameter {name}")


def assert_same_on_every_rank(values: np.ndarray, name: str) -> None:
    """``values`` is bit-identical on every rank (checked with an allgather named ``name``)."""
    gathered = hvd.allgather(mx.nd.array(values.reshape(1, -1), dtype=values.dtype), name=name)
    rows = gathered.asnumpy()
    for r in range(size()):
        np.testing.assert_array_equal(rows[r], rows[0], err_msg=f"rank {r} differs from rank 0")


SGD = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3})
ADAM = ("adam", {"learning_rate": 0.01, "wd": 1e-3})


# ------------------------------------------------------------------------ DistributedTrainer


@pytest.mark.parametrize(
    ("case", "optimizer", "num_groups", "predivide", "dtype"),
    [
        ("sgd", SGD, 0, 1.0, "float64"),
        ("adam", ADAM, 0, 1.0, "float64"),
        ("groups", SGD, 2, 1.0, "float64"),
        ("predivide", ADAM, 0, 4.0, "float64"),
        ("float32", SGD, 1, 2.0, "float32"),
    ],
)
def test_trainer_matches_one_process(case: str, optimizer: tuple, num_groups: int,
                                     predivide: float, dtype: str) -> None:
    name, params = optimizer
    net = build_net(f"t_{case}_", dtype)
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params),
                                     num_groups=num_groups,
                                     gradient_predivide_factor=predivide, prefix=f"{case}.")
    train(net, trainer, dtype, distributed=True)
    assert_weights_close(weights(net), reference(name, params, dtype), dtype)


def test_trainer_skips_frozen_parameters() -> None:
    name, params = SGD
    net = build_net("frozen_")
    frozen = ("dense0_weight",)
    for pname, param in net.collect_params().items():
        if suffix(pname, "frozen_") in frozen:
            param.grad_req = "null"
    before = weights(net)["dense0_weight"].copy()
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), prefix="frozen.")
    train(net, trainer, "float64", distributed=True)
    after = weights(net)
    np.testing.assert_array_equal(after["dense0_weight"], before)
    assert_weights_close(after, reference(name, params, frozen=frozen), "float64")


def test_two_trainers_with_prefixes() -> None:
    name, params = SGD
    net_a, net_b = build_net("two_a_"), build_net("two_b_")
    trainer_a = hvd.DistributedTrainer(net_a.collect_params(), name, dict(params), prefix="a.")
    trainer_b = hvd.DistributedTrainer(net_b.collect_params(), "adam", dict(ADAM[1]),
                                       prefix="b.", num_groups=1)
    for step in range(STEPS):
        x, y = global_batch(step, "float64")
        backward(net_a, shard(x), shard(y))
        backward(net_b, shard(x), shard(y))
        trainer_a.step(BATCH)
        trainer_b.step(BATCH)
    assert_weights_close(weights(net_a), reference(name, params), "float64")
    assert_weights_close(weights(net_b), reference("adam", ADAM[1]), "float64")


def test_trainer_unwraps_distributed_optimizer() -> None:
    name, params = SGD
    net = build_net("unwrap_")
    opt = hvd.DistributedOptimizer(mx.optimizer.create(name, **params))
    with pytest.warns(UserWarning, match="DistributedOptimizer"):
        trainer = hvd.DistributedTrainer(net.collect_params(), opt, prefix="unwrap.")
    assert not isinstance(trainer._optimizer, hvd.DistributedOptimizer)
    train(net, trainer, "float64", distributed=True)
    assert_weights_close(weights(net), reference(name, params), "float64")


def test_allreduce_grads_then_update() -> None:
    """The gradient-clipping workflow: allreduce_grads(), inspect or change grads, update()."""
    name, params = SGD
    net = build_net("split_")
    ref = build_net("splitref_")
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), prefix="split.")
    ref_trainer = mx.gluon.Trainer(ref.collect_params(), name, dict(params), kvstore=None)
    x, y = global_batch(0, "float64")
    backward(net, shard(x), shard(y))
    backward(ref, x, y)
    trainer.allreduce_grads()
    for pname, param in net.collect_params().items():
        expected = ref.collect_params()["splitref_" + suffix(pname, "split_")].grad().asnumpy()
        np.testing.assert_allclose(param.grad().asnumpy(), expected, rtol=1e-10, atol=1e-12)
    trainer.update(BATCH)
    ref_trainer.step(size() * BATCH)
    assert_weights_close(weights(net), weights(ref), "float64")


def test_trainer_with_two_contexts() -> None:
    """A parameter on two CPU contexts: local copies are summed, then reduced over the ranks."""
    name, params = SGD
    contexts = [mx.cpu(0), mx.cpu(1)]
    net = build_net("ctx_", ctx=contexts)
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), prefix="ctx.")
    loss_fn = mx.gluon.loss.L2Loss()
    for step in range(STEPS):
        x, y = global_batch(step, "float64")
        xs = mx.gluon.utils.split_and_load(mx.nd.array(shard(x), dtype="float64"), contexts,
                                           even_split=False)
        ys = mx.gluon.utils.split_and_load(mx.nd.array(shard(y), dtype="float64"), contexts,
                                           even_split=False)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        for loss in losses:
            loss.backward()
        trainer.step(BATCH)
    for param in net.collect_params().values():
        copies = [a.asnumpy() for a in param.list_data()]
        np.testing.assert_allclose(copies[1], copies[0], rtol=1e-12)
    assert_weights_close(weights(net), reference(name, params), "float64")


def test_fp16_compression_trains_close_to_reference() -> None:
    name, params = SGD
    net = build_net("fp16_")
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), prefix="fp16.",
                                     compression=hvd.Compression.fp16)
    train(net, trainer, "float64", distributed=True)
    assert_weights_close(weights(net), reference(name, params), "float64", rtol=2e-2)
    for param in net.collect_params().values():
        assert param.data().dtype == np.float64


# ---------------------------------------------------------------------- DistributedOptimizer


@pytest.mark.parametrize(("num_groups", "predivide"), [(0, 1.0), (1, 2.0)])
def test_distributed_optimizer_with_gluon_trainer(num_groups: int, predivide: float) -> None:
    name, params = SGD
    net = build_net(f"dopt{num_groups}_")
    opt = hvd.DistributedOptimizer(mx.optimizer.create(name, **params), num_groups=num_groups,
                                   gradient_predivide_factor=predivide)
    trainer = mx.gluon.Trainer(net.collect_params(), opt, kvstore=None)
    train(net, trainer, "float64", distributed=True)
    assert_weights_close(weights(net), reference(name, params), "float64")


def test_distributed_optimizer_adam_one_index_at_a_time() -> None:
    """Adam's updater calls update() with one index at a time (no aggregation)."""
    name, params = ADAM
    net = build_net("dadam_")
    inner = mx.optimizer.create(name, **params)
    inner.aggregate_num = 0
    trainer = mx.gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(inner),
                               kvstore=None)
    train(net, trainer, "float64", distributed=True)
    assert_weights_close(weights(net), reference(name, params), "float64")


def test_distributed_optimizer_delegates() -> None:
    inner = mx.optimizer.SGD(learning_rate=0.1, momentum=0.5)
    opt = hvd.DistributedOptimizer(inner, gradient_predivide_factor=2.0)
    assert opt.rescale_grad == pytest.approx(2.0 / size())
    assert opt.momentum == 0.5 and opt.learning_rate == pytest.approx(0.1)
    opt.set_learning_rate(0.2)
    assert inner.learning_rate == pytest.approx(0.2)
    opt.set_lr_mult({"w": 0.5})
    opt.set_wd_mult({"w": 0.0})
    assert inner.lr_mult["w"] == 0.5 and inner.wd_mult["w"] == 0.0
    opt.rescale_grad = 0.25
    assert inner.rescale_grad == 0.25
    weight = mx.nd.ones((3,), dtype="float64")
    state = opt.create_state_multi_precision(0, weight)
    assert state is not None and state.shape == (3,)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer(opt)


# ------------------------------------------------------------------------ broadcast_parameters


def test_broadcast_parameters() -> None:
    root = size() - 1
    net = build_net("bcast_")
    set_weights(net, ("rank", rank()))
    expected_net = build_net("bcast_expected_")
    set_weights(expected_net, ("rank", root))
    hvd.broadcast_parameters(net.collect_params(), root_rank=root, prefix="bcast")
    assert_weights_close(weights(net), weights(expected_net), "float64", rtol=0.0)


@pytest.mark.parametrize("hybridize", [False, True])
def test_broadcast_parameters_deferred_init(hybridize: bool) -> None:
    """Shapes known only at the first forward pass: broadcast right after initialization, so
    even the first forward pass (same input on every rank) gives the same output everywhere."""
    net = build_net("deferred_", deferred=True)
    net.initialize(mx.init.Normal(1.0), force_reinit=True)
    if hybridize:
        net.hybridize()
    mx.random.seed(1000 + rank())
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0, prefix=f"deferred{hybridize}")
    deferred = [n for n, p in params.items() if p._deferred_init]
    assert sorted(deferred) == ["deferred_dense0_weight", "deferred_dense1_weight"]
    x, _ = global_batch(0, "float64")
    out = net(mx.nd.array(x, dtype="float64"))
    for name, param in params.items():
        assert "_finish_deferred_init" not in vars(param), name
        assert_same_on_every_rank(param.data().asnumpy(), f"deferred{hybridize}.check.{name}")
    assert_same_on_every_rank(out.asnumpy(), f"deferred{hybridize}.check.out")


def test_broadcast_parameters_then_train_from_different_inits() -> None:
    """The usual script: different random inits, broadcast from rank 0, then train."""
    name, params = SGD
    net = build_net("bstart_")
    set_weights(net, ("random", rank()))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), prefix="bstart.")
    train(net, trainer, "float64", distributed=True)
    for pname, value in weights(net).items():
        assert_same_on_every_rank(value, f"bstart.check.{pname}")


def test_broadcast_parameters_dict_of_ndarrays() -> None:
    root = 0
    values = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3) + rank(),
        "b": np.arange(4, dtype=np.int32) * (rank() + 1),
    }
    arrays = {k: mx.nd.array(v, dtype=v.dtype) for k, v in values.items()}
    hvd.broadcast_parameters(arrays, root_rank=root, prefix="plain")
    np.testing.assert_array_equal(arrays["w"].asnumpy(), np.arange(6).reshape(2, 3) + root)
    np.testing.assert_array_equal(arrays["b"].asnumpy(), np.arange(4) * (root + 1))


def test_broadcast_parameters_refuses_other_types() -> None:
    with pytest.raises(ValueError):
        hvd.broadcast_parameters([mx.nd.ones((2,))], root_rank=0)
    with pytest.raises(TypeError):
        hvd.broadcast_parameters({"x": np.ones(2)}, root_rank=0)


# ----------------------------------------------------------------------------------- errors


def test_mismatched_models_raise_on_every_rank() -> None:
    if size() < 2:
        pytest.skip("needs two ranks")
    net = build_net("mm_", hidden=HIDDEN + rank())
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                     prefix="mm.")
    x, y = global_batch(0, "float64")
    backward(net, shard(x), shard(y))
    with pytest.raises(hora.HoraError):
        trainer.step(BATCH)
    hvd.barrier()
