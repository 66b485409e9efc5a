"""What each rank of a ``TorchEstimator`` fit runs: read its share of the rows, train with
``hora.torch``'s DistributedOptimizer, average the metrics over the ranks each epoch, and on
rank 0 write the checkpoint after every epoch and return it with the history."""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hora.spark.common import data
from hora.spark.common.estimator import TrainSpec


@dataclasses.dataclass
class TorchSpec:
    """The framework half of a fit: model and loss pickled with cloudpickle, the optimizer as
    its class and state (rebuilt on each rank around the rank's own copy of the model)."""

    model: bytes
    optimizer_cls: type
    optimizer_state: dict[str, Any]
    loss: bytes
    loss_weights: list[float]
    metrics: bytes
    input_shapes: list[list[int]] | None
    gradient_compression: Any


def to_bytes(state: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def from_bytes(blob: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(blob), weights_only=False)


def shaped_inputs(arrays: Sequence[np.ndarray], input_shapes: list[list[int]] | None) -> list[Any]:
    """One tensor per feature column, given ``input_shapes`` (each without the batch
    dimension, or starting with -1) when set."""
    import torch

    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    if not input_shapes:
        return tensors
    return [t.reshape(list(shape) if shape and shape[0] == -1 else [-1, *shape])
            for t, shape in zip(tensors, input_shapes)]


def _as_list(outputs: Any) -> list[Any]:
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _shape_labels(outputs: list[Any], labels: list[Any],
                  label_shapes: list[list[int]] | None) -> list[Any]:
    """Labels in the outputs' shapes (Horovod's rule): ``label_shapes`` when set, else each
    output's shape when it has as many elements."""
    if label_shapes:
        return [label.reshape(shape) for label, shape in zip(labels, label_shapes)]
    return [label.reshape(output.shape) if output.numel() == label.numel() else label
            for output, label in zip(outputs, labels)]


def _unreduced(loss_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``loss_fn`` returning one loss per sample: a copy of a loss module with
    ``reduction='none'``, or a functional loss called with that keyword."""
    if hasattr(loss_fn, "reduction"):
        module = copy.copy(loss_fn)
        module.reduction = "none"  # type: ignore[attr-defined]
        return module  # type: ignore[no-any-return]
    return lambda output, label: loss_fn(output, label, reduction="none")


def batch_loss(outputs: list[Any], labels: list[Any], loss_fns: list[Callable[..., Any]],
               loss_weights: list[float], sample_weights: Any = None) -> Any:
    """The weighted sum of the losses of each output; with ``sample_weights``, each sample's
    loss is multiplied by its weight before the mean (Horovod's rule: not a weighted mean)."""
    total = 0
    for output, label, loss_fn, weight in zip(outputs, labels, loss_fns, loss_weights):
        if sample_weights is None:
            loss = loss_fn(output, label)
        else:
            loss = (_unreduced(loss_fn)(output, label).flatten() * sample_weights).mean()
        total = total + loss * weight
    return total


class _Meter:
    """Sums of a rank's losses and metrics over an epoch, averaged over all ranks at its end."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.sums = np.zeros(len(names), dtype=np.float64)
        self.count = 0

    def add(self, values: list[float]) -> None:
        self.sums += np.asarray(values, dtype=np.float64)
        self.count += 1

    def averages(self, hvd: Any, name: str) -> dict[str, float]:
        import torch

        totals = torch.from_numpy(np.append(self.sums, self.count))
        totals = hvd.allreduce(totals, op=hvd.Sum, name=name).numpy()
        count = max(totals[-1], 1.0)
        return {metric: float(total / count) for metric, total in zip(self.names, totals[:-1])}


def train(spec: TrainSpec, torch_spec: TorchSpec,
          checkpoint: bytes | None) -> tuple[list[dict[str, Any]], bytes] | None:
    """Train on this rank; rank 0 returns ``(history, checkpoint)``, the others None."""
    import importlib

    import torch
    from pyspark import cloudpickle

    hvd: Any = importlib.import_module("hora.torch")
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec.random_seed is not None:
        torch.manual_seed(spec.random_seed)
    device = torch.device(f"cuda:{hvd.local_rank()}" if spec.use_gpu and
                          torch.cuda.is_available() else "cpu")
    model = cloudpickle.loads(torch_spec.model).to(device)
    optimizer = torch_spec.optimizer_cls(model.parameters(), lr=1)
    optimizer.load_state_dict(torch_spec.optimizer_state)
    if checkpoint is not None:
        state = from_bytes(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    # Horovod's estimators scale the learning rate by the number of ranks.
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * size
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    passes = spec.backward_passes_per_step
    dist_opt = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=torch_spec.gradient_compression or hvd.Compression.none,
        backward_passes_per_step=passes)

    loss_fns = _as_list(cloudpickle.loads(torch_spec.loss))
    metrics = cloudpickle.loads(torch_spec.metrics) or []
    metric_names = ["loss"] + [getattr(m, "__name__", f"metric_{i}") for i, m in enumerate(metrics)]
    weights = torch_spec.loss_weights or [1.0] * len(loss_fns)

    def step_values(arrays: dict[str, np.ndarray], idx: np.ndarray) -> tuple[Any, list[float]]:
        inputs = [t.to(device) for t in shaped_inputs(
            [arrays[c][idx] for c in spec.feature_cols], torch_spec.input_shapes)]
        labels = [torch.from_numpy(arrays[c][idx]).to(device) for c in spec.label_cols]
        sample_weights = (torch.from_numpy(arrays[spec.sample_weight_col][idx]).float().to(device)
                          if spec.sample_weight_col else None)
        outputs = _as_list(model(*inputs))
        labels = _shape_labels(outputs, labels, spec.label_shapes)
        loss = batch_loss(outputs, labels, loss_fns, weights, sample_weights)
        with torch.no_grad():
            values = [float(loss)] + [float(m(outputs[0], labels[0])) for m in metrics]
        return loss, values

    train_rows = spec.read(spec.data.train_path, rank, size)
    shard_rows = data.row_count(train_rows)
    stream = data.batches(shard_rows, spec.batch_size, spec.shuffle, spec.seed(rank))
    steps = max(passes, spec.steps_per_epoch(size) // passes * passes)
    val_rows = (spec.read(spec.data.val_path, rank, size) if spec.data.val_path else None)

    history: list[dict[str, Any]] = []
    for epoch in range(spec.epochs):
        model.train()
        meter = _Meter(metric_names)
        for step in range(steps):
            if step % passes == 0:
                dist_opt.zero_grad()
            loss, values = step_values(train_rows, next(stream))
            (loss / passes).backward()
            if (step + 1) % passes == 0:
                dist_opt.step()
            meter.add(values)
        record: dict[str, Any] = {"epoch": epoch, "train": meter.averages(hvd, f"train.{epoch}")}
        if val_rows is not None:
            record["validation"] = _validate(spec, val_rows, metric_names, step_values, model,
                                             hvd, epoch)
        history.append(record)
        if rank == 0:
            if spec.verbose >= 1:
                print(f"hora.spark.torch: {record}", flush=True)
            unscaled = copy.deepcopy(optimizer.state_dict())
            for group in unscaled["param_groups"]:
                group["lr"] = group["lr"] / size
            spec.store.write(spec.store.get_checkpoint_path(spec.run_id), to_bytes(
                {"model": model.state_dict(), "optimizer": unscaled, "epoch": epoch,
                 "history": history}))
    if rank != 0:
        return None
    return history, spec.store.read(spec.store.get_checkpoint_path(spec.run_id))


def _validate(spec: TrainSpec, rows: dict[str, np.ndarray], names: list[str],
              step_values: Callable[..., tuple[Any, list[float]]], model: Any, hvd: Any,
              epoch: int) -> dict[str, float]:
    import torch

    model.eval()
    meter = _Meter(names)
    shard_rows = data.row_count(rows)
    with torch.no_grad():
        for step in range(spec.validation_steps(shard_rows)):
            idx = np.arange(step * spec.val_batch_size,
                            min(shard_rows, (step + 1) * spec.val_batch_size))
            meter.add(step_values(rows, idx)[1])
    return meter.averages(hvd, f"validation.{epoch}")


def predict(model_bytes: bytes, input_shapes: list[list[int]] | None,
            arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs for one batch of feature arrays."""
    import torch
    from pyspark import cloudpickle

    model = cloudpickle.loads(model_bytes)
    model.eval()
    with torch.no_grad():
        outputs = _as_list(model(*shaped_inputs(arrays, input_shapes)))
    return [o.detach().cpu().numpy() for o in outputs]
