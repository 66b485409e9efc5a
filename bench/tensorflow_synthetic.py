"""TensorFlow training-step throughput: hora.tensorflow against MultiWorkerMirroredStrategy.

    python bench/tensorflow_synthetic.py [--np 2] [--model small_cnn] [--batch-size 32]
        [--steps 50] [--warmup 10] [--json PATH]

The same model, per-rank batch and optimizer (SGD) run as a ``tf.function`` step on N CPU
processes on this host, once with Hora (``horarun``, ``DistributedGradientTape``, each
gradient's reduction submitted as soon as it exists) and once with
``tf.distribute.MultiWorkerMirroredStrategy`` (N workers found through ``TF_CONFIG`` on localhost
ports, its collective all-reduce inside the optimizer). A third run trains every rank alone, with
no communication at all: its step time bounds what any data-parallel run can reach on this host.
Rank 0 of each run writes its timings as JSON; this process prints them, rank 0's CPU time per
step (all its threads; other load on the machine does not count in it, though it still slows
the step) and the ratios of steps per second (hora / MWMS above 1: Hora is faster), with the
load average before and after. The runs alternate for ``--rounds`` rounds so that a change of
machine load does not favour one of them. The figures go to the results file (``--json``, by
default bench/results/tensorflow_synthetic-np<N>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.launch import free_ports, horarun_command
from common.results import Recorder, json_help

QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}
LABELS = (("hora", "hora.tensorflow"), ("mwms", "MultiWorkerMirroredStrategy"),
          ("local", "no communication (bound)"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags of the driver and of the workers it starts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="number of processes")
    parser.add_argument("--model", default="small_cnn", choices=["small_cnn", "mlp"])
    parser.add_argument("--batch-size", type=int, default=32, help="batch size per process")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating rounds of both runs (against drifting machine load)")
    parser.add_argument("--json", type=Path, help=json_help("tensorflow_synthetic"))
    parser.add_argument("--worker", choices=["hora", "mwms", "local"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------ workers


def build_model(name: str, image_size: int) -> Any:
    """The benchmarked model (created inside a strategy scope for MWMS)."""
    import keras

    inputs = keras.Input((image_size, image_size, 3))
    if name == "small_cnn":
        x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(64, 3, activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(128, activation="relu")(x)
    else:
        x = keras.layers.Flatten()(inputs)
        for width in (1024, 512, 256):
            x = keras.layers.Dense(width, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def time_steps(step: Callable[[], Any], warmup: int, steps: int) -> dict[str, Any]:
    """Per-step wall times of ``steps`` calls after ``warmup`` calls, and the process's CPU
    time per step over them."""
    for _ in range(warmup):
        step()
    times = []
    cpu_start = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"times": times, "cpu": (time.process_time() - cpu_start) / steps}


def synthetic_batch(rank: int, args: argparse.Namespace) -> tuple[Any, Any]:
    """Random images and labels of one rank."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(rank)
    shape = (args.batch_size, args.image_size, args.image_size, 3)
    return (tf.constant(rng.random(shape, np.float32)),
            tf.constant(rng.integers(0, 10, args.batch_size), tf.int64))


def hora_worker(args: argparse.Namespace, communicate: bool) -> None:
    """One rank of the Hora run (started by horarun). Without ``communicate`` each rank trains
    on its own: the step time no data-parallel run on this host can beat."""
    import hora.tensorflow as hvd
    import keras
    import tensorflow as tf

    hvd.init()
    model = build_model(args.model, args.image_size)
    opt = keras.optimizers.SGD(0.01)
    opt.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables, root_rank=0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    data, target = synthetic_batch(hvd.rank(), args)

    @tf.function
    def step() -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        if communicate:
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    timings = time_steps(step, args.warmup, args.steps)
    if hvd.rank() == 0:
        Path(args.out).write_text(json.dumps(timings))
    hvd.shutdown()


def mwms_worker(args: argparse.Namespace) -> None:
    """One worker of the MultiWorkerMirroredStrategy run (TF_CONFIG set by the driver)."""
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    import keras

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model(args.model, args.image_size)
        opt = keras.optimizers.SGD(0.01)
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    data, target = synthetic_batch(task, args)

    def replica_step(x: Any, y: Any) -> None:
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.reduce_sum(per_example) / global_batch
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def step() -> None:
        strategy.run(replica_step, args=(data, target))

    timings = time_steps(step, args.warmup, args.steps)
    if task == 0:
        Path(args.out).write_text(json.dumps(timings))


# ------------------------------------------------------------------------------------- driver


def worker_args(args: argparse.Namespace, kind: str, out: str) -> list[str]:
    """The command line of one worker process."""
    return [sys.executable, os.path.abspath(__file__), "--worker", kind, "--out", out,
            "--model", args.model, "--batch-size", str(args.batch_size),
            "--image-size", str(args.image_size), "--steps", str(args.steps),
            "--warmup", str(args.warmup)]


def run_hora(args: argparse.Namespace, out: str, kind: str = "hora") -> None:
    """All ranks of the Hora run (or of the run without communication), through horarun."""
    env = dict(os.environ, **QUIET_ENV)
    subprocess.run(horarun_command(args.np) + worker_args(args, kind, out), env=env, check=True)


def run_local(args: argparse.Namespace, out: str) -> None:
    """All ranks, each training alone: the bound set by computation on this host."""
    run_hora(args, out, kind="local")


def run_mwms(args: argparse.Namespace, out: str) -> None:
    """All workers of the MWMS run, each with its TF_CONFIG."""
    workers = [f"localhost:{p}" for p in free_ports(args.np)]
    procs = []
    for index in range(args.np):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, **QUIET_ENV, TF_CONFIG=json.dumps(tf_config))
        procs.append(subprocess.Popen(worker_args(args, "mwms", out), env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"MultiWorkerMirroredStrategy workers failed: exit codes {codes}")


def summary(times: list[float], cpus: list[float], batch_size: int,
            nproc: int) -> dict[str, float]:
    """Median step time, steps/s, total images/s and rank 0's mean CPU time per step."""
    median = statistics.median(times)
    return {"step_ms": median * 1e3, "steps_per_s": 1.0 / median,
            "img_per_s": batch_size * nproc / median, "cpu_ms": statistics.mean(cpus) * 1e3}


def result_rows(results: dict[str, dict[str, float]], model: str) -> list[dict[str, Any]]:
    """The summaries as rows of the results file (seconds)."""
    return [{"implementation": label, "case": model, "median_s": r["step_ms"] / 1e3,
             "steps_per_s": r["steps_per_s"], "images_per_s": r["img_per_s"],
             "rank0_cpu_s": r["cpu_ms"] / 1e3}
            for kind, label in LABELS for r in [results[kind]]]


def main() -> None:
    """Drive both runs (or act as one worker) and print the comparison."""
    args = parse_args()
    if args.worker in ("hora", "local"):
        hora_worker(args, communicate=args.worker == "hora")
        return
    if args.worker == "mwms":
        mwms_worker(args)
        return
    recorder = Recorder("tensorflow_synthetic",
                        packages=("tensorflow", "tensorflow-cpu", "keras", "numpy"))
    runners = {"hora": run_hora, "mwms": run_mwms, "local": run_local}
    times: dict[str, list[float]] = {kind: [] for kind in runners}
    cpus: dict[str, list[float]] = {kind: [] for kind in runners}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            order = list(runners) if round_index % 2 == 0 else list(reversed(runners))
            for kind in order:
                out = os.path.join(tmp, f"{kind}{round_index}.json")
                runners[kind](args, out)
                timings = json.loads(Path(out).read_text())
                times[kind] += timings["times"]
                cpus[kind].append(timings["cpu"])
    results = {kind: summary(times[kind], cpus[kind], args.batch_size, args.np)
               for kind in runners}
    print(f"\nmodel={args.model} image={args.image_size} batch/rank={args.batch_size} "
          f"ranks={args.np} steps={args.steps} x {args.rounds} alternating rounds "
          f"(median step time); load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print(f"{'':28}{'step ms':>10}{'steps/s':>10}{'img/s':>10}{'CPU ms':>10}")
    for kind, label in LABELS:
        r = results[kind]
        print(f"{label:28}{r['step_ms']:10.2f}{r['steps_per_s']:10.2f}{r['img_per_s']:10.1f}"
              f"{r['cpu_ms']:10.2f}")
    ratio = results["hora"]["steps_per_s"] / results["mwms"]["steps_per_s"]
    print(f"ratio hora / MWMS (steps/s): {ratio:.2f}")
    best = results["local"]["steps_per_s"] / results["mwms"]["steps_per_s"]
    print(f"ratio bound / MWMS (steps/s): {best:.2f}  (no run with communication can exceed it)")
    print("CPU ms: rank 0's CPU time per step, all threads (mean over the rounds)")
    settings = {"ranks": args.np, "model": args.model, "image_size": args.image_size,
                "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
                "rounds": args.rounds, "figure": "median step time over every round's steps"}
    recorder.write(args.json, settings, result_rows(results, args.model), ranks=args.np)


if __name__ == "__main__":
    main()
