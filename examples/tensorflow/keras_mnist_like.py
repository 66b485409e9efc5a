"""Keras 3 ``model.fit`` on N ranks with hora.keras, on generated MNIST-like data.

    horarun -np 2 python examples/tensorflow/keras_mnist_like.py [--epochs 4] [--batch-size 64]

Each rank generates the same 28x28 "digits" (random images whose label is a fixed random
linear function of the pixels, so the task is learnable) and trains on its own shard. The
script shows the usual recipe: scale the learning rate by the number of ranks, wrap the
optimizer, broadcast the initial state, average metrics, warm the learning rate up, and let
only rank 0 print and save checkpoints.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import hora.keras as hvd
import keras
import numpy as np


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description="Keras model.fit with hora on generated data")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64, help="batch size per rank")
    parser.add_argument("--samples", type=int, default=8192, help="samples in the data set")
    parser.add_argument("--lr", type=float, default=0.05, help="single-rank learning rate")
    parser.add_argument("--warmup-epochs", type=int, default=1)
    return parser.parse_args()


def generate(samples: int, seed: int = 1234) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-shaped images and labels that a small network can learn."""
    rng = np.random.default_rng(seed)
    images = rng.random((samples, 28, 28, 1), dtype=np.float32)
    projection = rng.standard_normal((28 * 28, 10)).astype(np.float32)
    labels = np.argmax(images.reshape(samples, -1) @ projection, axis=1).astype(np.int64)
    return images, labels


def build_model() -> keras.Model:
    """A small convolutional classifier."""
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def main() -> None:
    """Train, then print the averaged metrics of the last epoch on rank 0."""
    args = parse_args()
    hvd.init()
    images, labels = generate(args.samples)
    shard = slice(hvd.rank(), None, hvd.size())
    x_train, y_train = images[shard], labels[shard]

    keras.utils.set_random_seed(hvd.rank())  # different initial weights: the broadcast fixes it
    model = build_model()
    scaled_lr = args.lr * hvd.size()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs,
                                                 verbose=1 if hvd.rank() == 0 else 0),
    ]
    checkpoint_dir = tempfile.mkdtemp(prefix="hora_keras_example_")
    if hvd.rank() == 0:
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(checkpoint_dir, "checkpoint-{epoch}.keras")))

    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                        callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
    if hvd.rank() == 0:
        last = {k: round(float(v[-1]), 4) for k, v in history.history.items()}
        print(f"Final epoch (averaged over {hvd.size()} ranks): {last}")
        print(f"Checkpoints in {checkpoint_dir}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
