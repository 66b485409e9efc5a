"""Synthetic-data training throughput of a PyTorch model with Hora (Horovod's benchmark flags).

    horarun -np 2 python examples/pytorch/synthetic_benchmark.py --model mlp

Every step runs zero_grad, forward, cross-entropy, backward and a DistributedOptimizer step on
random inputs that never change, so the figure measures compute plus gradient communication.
Models are defined here (torchvision is not needed): ``mlp`` (default), ``cnn`` and ``resnet18``.
"""

from __future__ import annotations

import argparse
import os
import timeit
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MODELS = ("mlp", "cnn", "resnet18")


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block."""
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet18(nn.Module):
    """The ResNet-18 layout (4 stages of 2 basic blocks, 64..512 channels)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = 64
        for i, cout in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            layers += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images."""
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_model(name: str, image_size: int, num_classes: int) -> nn.Module:
    """One of the benchmark models for 3-channel square images of ``image_size`` pixels."""
    if name == "mlp":
        width = 2048
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(3 * image_size * image_size, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, num_classes),
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(128 * 16, 512),
            nn.ReLU(),
            nn.Linear(512, num_classes),
        )
    if name == "resnet18":
        return ResNet18(num_classes)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def default_image_size(model: str) -> int:
    """Image size used when --image-size is not given (224 for ResNet-18, as in Horovod)."""
    return 224 if model == "resnet18" else 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags (Horovod's names plus --image-size, --num-classes, --threads)."""
    parser = argparse.ArgumentParser(
        description="PyTorch Synthetic Benchmark",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--fp16-allreduce",
        action="store_true",
        default=False,
        help="use fp16 compression during allreduce",
    )
    parser.add_argument("--model", type=str, default="mlp", choices=MODELS, help="model")
    parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
    parser.add_argument(
        "--num-warmup-batches",
        type=int,
        default=10,
        help="number of warm-up batches that don't count towards benchmark",
    )
    parser.add_argument(
        "--num-batches-per-iter",
        type=int,
        default=10,
        help="number of batches per benchmark iteration",
    )
    parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
    parser.add_argument(
        "--no-cuda", action="store_true", default=False, help="disables CUDA training"
    )
    parser.add_argument(
        "--use-adasum",
        action="store_true",
        default=False,
        help="use adasum algorithm to do reduction",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="height and width of the synthetic images (default: per model)",
    )
    parser.add_argument("--num-classes", type=int, default=1000, help="number of classes")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per rank (0: cores divided by local ranks)",
    )
    args = parser.parse_args(argv)
    if args.image_size is None:
        args.image_size = default_image_size(args.model)
    return args


def threads_per_rank(requested: int, local_size: int) -> int:
    """Torch intra-op threads so that the ranks of one host do not oversubscribe its cores."""
    if requested > 0:
        return requested
    return max(1, (os.cpu_count() or 1) // max(1, local_size))


def time_steps(
    step: Callable[[], None],
    warmup: int,
    per_iter: int,
    iters: int,
    batch: int,
    log: Callable[[str], None],
    device_label: str,
) -> list[float]:
    """Run warm-up then ``iters`` timed iterations; returns img/sec of each iteration."""
    log("Running warmup...")
    timeit.timeit(step, number=warmup)
    log("Running benchmark...")
    rates = []
    for i in range(iters):
        seconds = timeit.timeit(step, number=per_iter)
        rate = batch * per_iter / seconds
        log(f"Iter #{i}: {rate:.1f} img/sec per {device_label}")
        rates.append(rate)
    return rates


def summary_lines(rates: list[float], workers: int, device_label: str) -> list[str]:
    """Horovod's two result lines: per-device mean +- 1.96 sigma, and the total."""
    mean = float(np.mean(rates))
    conf = 1.96 * float(np.std(rates))
    return [
        f"Img/sec per {device_label}: {mean:.1f} +-{conf:.1f}",
        f"Total img/sec on {workers} {device_label}(s): {workers * mean:.1f} +-{workers * conf:.1f}",
    ]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark on the ranks started by horarun."""
    import hora.torch as hvd

    args = parse_args(argv)
    hvd.init()
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device_label = "GPU" if use_cuda else "CPU"
    torch.set_num_threads(threads_per_rank(args.threads, hvd.local_size()))
    torch.manual_seed(1234)
    if use_cuda:
        torch.cuda.set_device(hvd.local_rank())

    model = build_model(args.model, args.image_size, args.num_classes)
    lr_scaler = hvd.size() if not args.use_adasum else 1
    if use_cuda:
        model.cuda()
        if args.use_adasum and hvd.nccl_built():
            lr_scaler = hvd.local_size()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=compression,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))
    if use_cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(line: str) -> None:
        if hvd.rank() == 0:
            print(line, flush=True)

    log(f"Model: {args.model}")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of {device_label}s: {hvd.size()}")
    rates = time_steps(
        benchmark_step,
        args.num_warmup_batches,
        args.num_batches_per_iter,
        args.num_iters,
        args.batch_size,
        log,
        device_label,
    )
    for line in summary_lines(rates, hvd.size(), device_label):
        log(line)
    hvd.shutdown()


if __name__ == "__main__":
    main()
