"""Synthetic TensorFlow 2 benchmark with hora.tensorflow: images per second of training steps.

    horarun -np 2 python examples/tensorflow/synthetic_benchmark.py [--model small_cnn]
        [--batch-size 32] [--num-iters 10] [--num-batches-per-iter 10] [--fp16-allreduce]

Random images and labels (no downloads), a ``tf.function`` training step with
``DistributedGradientTape``, and variables broadcast from rank 0 before the first step. Rank 0
prints the throughput of each iteration and the mean with a 95% interval, per rank and in total.
``--model`` is ``small_cnn`` (default, quick on a CPU), ``mlp``, or the name of any
``keras.applications`` model (for instance ``ResNet50``; slow on a CPU).
"""

from __future__ import annotations

import argparse
import os
import timeit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import hora.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf


def parse_args() -> argparse.Namespace:
    """Command-line flags (those of Horovod's synthetic benchmark, plus the image size)."""
    parser = argparse.ArgumentParser(description="TensorFlow synthetic benchmark",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="small_cnn",
                        help="small_cnn, mlp or a keras.applications model name")
    parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    parser.add_argument("--image-size", type=int, default=0,
                        help="image side (default: 32 for small_cnn/mlp, 224 otherwise)")
    parser.add_argument("--num-classes", type=int, default=10, help="number of classes")
    parser.add_argument("--num-warmup-batches", type=int, default=10,
                        help="number of warm-up batches that don't count towards benchmark")
    parser.add_argument("--num-batches-per-iter", type=int, default=10,
                        help="number of batches per benchmark iteration")
    parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="use fp16 compression during allreduce")
    parser.add_argument("--eager", action="store_true", help="run the step eagerly")
    return parser.parse_args()


def build_model(name: str, image_size: int, num_classes: int) -> keras.Model:
    """The benchmarked model: a small CNN, an MLP, or a keras.applications model."""
    inputs = keras.Input((image_size, image_size, 3))
    if name == "small_cnn":
        x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(64, 3, activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(128, activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name=name)
    if name == "mlp":
        x = keras.layers.Flatten()(inputs)
        for width in (1024, 512, 256):
            x = keras.layers.Dense(width, activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name=name)
    application = getattr(keras.applications, name)
    return application(weights=None, input_shape=(image_size, image_size, 3),
                       classes=num_classes, classifier_activation=None)


def main() -> None:
    """Run the benchmark and print Horovod-style throughput lines on rank 0."""
    args = parse_args()
    hvd.init()
    image_size = args.image_size or (32 if args.model in ("small_cnn", "mlp") else 224)
    model = build_model(args.model, image_size, args.num_classes)
    opt = keras.optimizers.SGD(0.01 * hvd.size())
    opt.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(opt.variables, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    rng = np.random.default_rng(hvd.rank())
    data = tf.constant(rng.random((args.batch_size, image_size, image_size, 3), np.float32))
    target = tf.constant(rng.integers(0, args.num_classes, args.batch_size), tf.int64)

    def train_step() -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    step = train_step if args.eager else tf.function(train_step)

    def log(text: str) -> None:
        if hvd.rank() == 0:
            print(text, flush=True)

    log(f"Model: {args.model}")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of ranks (CPU): {hvd.size()}")
    log("Running warmup...")
    timeit.timeit(step, number=args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log(f"Iter #{i}: {img_sec:.1f} img/sec per rank")
        img_secs.append(img_sec)
    mean, conf = float(np.mean(img_secs)), 1.96 * float(np.std(img_secs))
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f} "
        f"+-{hvd.size() * conf:.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
