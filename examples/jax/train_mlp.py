"""Train an MLP on generated data with Hora's JAX frontend and optax.

    horarun -np 2 python examples/jax/train_mlp.py

Needs JAX and optax (``pip install jax optax``). The dataset is generated from a fixed seed, so
every rank builds the same data and keeps its own shard. The script follows the usual Horovod
steps: init, broadcast the initial parameters, wrap the optimizer in DistributedOptimizer, and
average the metric with allreduce. The whole training step (gradients, their reduction across
ranks, the update) is one jitted function.
Rank 0 prints the loss of every epoch and exits non-zero if training did not reduce it.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hora.jax as hvd
import jax
import jax.numpy as jnp
import numpy as np
import optax


def make_dataset(samples: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and regression targets, identical on every rank for the same arguments."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, features)).astype(np.float32)
    y = np.sin(x @ rng.standard_normal((features, 1))).astype(np.float32)
    return x, y


def init_params(key: jax.Array, sizes: list[int]) -> list[dict[str, jax.Array]]:
    """Random dense layers; each rank starts differently until the broadcast."""
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) / np.sqrt(fan_in),
                       "b": jnp.zeros(fan_out)})
    return params


def loss_fn(params: list[dict[str, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    out = x @ params[-1]["w"] + params[-1]["b"]
    return jnp.mean((out - y) ** 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.003)
    args = parser.parse_args()

    hvd.init()
    x, y = make_dataset(2048, 16, seed=0)
    shard = slice(hvd.rank(), None, hvd.size())  # this rank's examples
    x, y = x[shard], y[shard]

    params = init_params(jax.random.PRNGKey(hvd.rank()), [16, 64, 64, 1])
    params = hvd.broadcast_parameters(params, root_rank=0)
    opt = hvd.DistributedOptimizer(optax.adam(args.lr))
    opt_state = opt.init(params)

    @jax.jit
    def train_step(params: list, opt_state: optax.OptState, x: jax.Array,
                   y: jax.Array) -> tuple[list, optax.OptState, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for epoch in range(args.epochs):
        epoch_loss = []
        for start in range(0, len(x) - args.batch_size + 1, args.batch_size):
            batch = slice(start, start + args.batch_size)
            params, opt_state, loss = train_step(params, opt_state, x[batch], y[batch])
            epoch_loss.append(float(loss))
        mean = float(hvd.allreduce(jnp.asarray(np.mean(epoch_loss)), name="epoch_loss"))
        losses.append(mean)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {mean:.4f}", flush=True)
    hvd.shutdown()
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
