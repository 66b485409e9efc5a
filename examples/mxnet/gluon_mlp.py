"""Train a Gluon MLP on generated data with Hora's MXNet frontend.

    horarun -np 2 python examples/mxnet/gluon_mlp.py

Needs MXNet 1.9.1 (``pip install mxnet==1.9.1 'numpy<2'``); ``import hora.mxnet`` makes it
importable on a current NumPy. The dataset is generated from a fixed seed, so every rank builds
the same data and keeps its own shard. The script follows the usual Horovod steps: init, scale the
learning rate by the number of ranks, broadcast the initial parameters (here with deferred
initialization: the input size is only known at the first forward pass), DistributedTrainer, and
average metrics with allreduce. Rank 0 prints the loss of every epoch and the final accuracy.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import hora.mxnet as hvd
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def make_dataset(samples: int, features: int, classes: int,
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points and labels, identical on every rank for the same arguments.

    Each class is a mixture of three overlapping Gaussian clusters squashed by tanh: not linearly
    separable, and noisy enough that the accuracy stays below 100%.
    """
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((3 * classes, features))
    cluster = rng.integers(0, 3 * classes, samples)
    x = 2.0 * np.tanh(centers[cluster] + 1.4 * rng.standard_normal((samples, features)))
    return x.astype(np.float32), (cluster % classes).astype(np.float32)


def build_model(classes: int) -> gluon.HybridBlock:
    """The network being trained; input sizes are inferred at the first forward pass."""
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(gluon.nn.Dense(128, activation="relu"))
        net.add(gluon.nn.Dense(128, activation="relu"))
        net.add(gluon.nn.Dense(classes))
    return net


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate of one rank")
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def average(value: float, name: str) -> float:
    """The mean of ``value`` over the ranks."""
    return float(hvd.allreduce(mx.nd.array([value]), name=name).asscalar())


def main() -> None:
    """Train, printing the loss per epoch and the final test accuracy on rank 0."""
    args = parse_args()
    hvd.init()
    mx.random.seed(args.seed + hvd.rank())  # different initial weights: the broadcast fixes them

    x, y = make_dataset(args.samples, args.features, args.classes, args.seed)
    split = int(0.8 * args.samples)
    train_x, train_y = x[hvd.rank():split:hvd.size()], y[hvd.rank():split:hvd.size()]
    test_x, test_y = x[split + hvd.rank()::hvd.size()], y[split + hvd.rank()::hvd.size()]

    net = build_model(args.classes)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)  # deferred: happens at the first forward pass
    trainer = hvd.DistributedTrainer(
        params, "sgd", {"learning_rate": args.lr * hvd.size(), "momentum": 0.9}
    )
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    # Every rank must run the same number of steps: use the smallest shard's batch count.
    steps = int(hvd.allreduce(mx.nd.array([len(train_x) // args.batch_size]), op=hvd.Min,
                              name="steps").asscalar())
    rng = np.random.default_rng(args.seed + 1000 + hvd.rank())
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = rng.permutation(len(train_x))
        total = 0.0
        for step in range(steps):
            rows = order[step * args.batch_size:(step + 1) * args.batch_size]
            data = mx.nd.array(train_x[rows])
            label = mx.nd.array(train_y[rows])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(args.batch_size)
            total += float(loss.mean().asscalar())
        epoch_loss = average(total / steps, f"loss.{epoch}")
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1:2d}  loss {epoch_loss:.4f}", flush=True)

    predictions = net(mx.nd.array(test_x)).argmax(axis=1).asnumpy()
    accuracy = average(float(np.mean(predictions == test_y)), "accuracy")
    if hvd.rank() == 0:
        elapsed = time.perf_counter() - start
        print(f"ranks {hvd.size()}  test accuracy {accuracy:.3f}  training time {elapsed:.1f} s")
    hvd.shutdown()


if __name__ == "__main__":
    main()
