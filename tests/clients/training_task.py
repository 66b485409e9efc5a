"""The training every client script runs: one model, one data set, one loss, seeded.

``tiny`` (8 features -> 16 -> 4 classes, 212 parameters) is what the tests train: small enough
that a few steps take milliseconds, big enough that every parameter moves. ``mlp`` and ``cnn``
are the models of examples/pytorch/synthetic_benchmark.py (32x32 images, 1000 classes), for the
timings of bench/clients.py, where the gradients are large enough for communication to matter.

The data set is the same on every rank (made from a fixed seed); the client shards it. Every rank
builds the model from the same seed too, so the start is identical whether or not the client
broadcasts it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

MODELS = ("tiny", "mlp", "cnn")
MODEL_SEED = 0
DATA_SEED = 1234
TINY_FEATURES = 8
TINY_CLASSES = 4
IMAGE_SIZE = 32
IMAGE_CLASSES = 1000

SYNTHETIC_BENCHMARK = (Path(__file__).resolve().parents[2] / "examples" / "pytorch" /
                       "synthetic_benchmark.py")


def _benchmark_model(name: str) -> nn.Module:
    """``name`` from examples/pytorch/synthetic_benchmark.py, loaded without importing Hora."""
    spec = importlib.util.spec_from_file_location("hora_synthetic_benchmark", SYNTHETIC_BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_model(name, IMAGE_SIZE, IMAGE_CLASSES)


def build_model(name: str) -> nn.Module:
    """The model ``name`` (one of MODELS), initialised from MODEL_SEED."""
    torch.manual_seed(MODEL_SEED)
    if name == "tiny":
        return nn.Sequential(nn.Linear(TINY_FEATURES, 16), nn.Tanh(), nn.Linear(16, TINY_CLASSES))
    if name in ("mlp", "cnn"):
        return _benchmark_model(name)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def make_dataset(name: str, samples: int) -> TensorDataset:
    """``samples`` inputs for model ``name`` with class labels, the same on every rank."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    if name == "tiny":
        inputs = torch.randn(samples, TINY_FEATURES, generator=generator)
        labels = torch.randint(0, TINY_CLASSES, (samples,), generator=generator)
    else:
        inputs = torch.randn(samples, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
        labels = torch.randint(0, IMAGE_CLASSES, (samples,), generator=generator)
    return TensorDataset(inputs, labels)


def samples_for(steps: int, batch_size: int, world_size: int = 2) -> int:
    """A data set size giving each of ``world_size`` ranks ``steps`` full batches in one epoch."""
    return steps * batch_size * world_size


def loss_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The training loss: cross-entropy."""
    return F.cross_entropy(logits, labels)


def flat_parameters(model: nn.Module) -> list[float]:
    """Every parameter of ``model``, flattened in registration order, as exact Python floats."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
