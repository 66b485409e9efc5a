"""Functions the tests run on the workers of a Ray job (imported there by module name)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

DTYPES = ("float32", "float64", "int32", "int64", "float16")
SIZES = (0, 1, 7, 1000)  # 1000 elements pass the tests' 1 KiB fusion threshold


def rank_data(rank: int, dtype: str, count: int) -> np.ndarray:
    """What ``rank`` contributes: small integers, exact in every dtype."""
    return ((np.arange(count) * (rank + 3)) % 17).astype(dtype)


def coordinates() -> tuple[int, ...]:
    """``hvd.init()`` with no arguments; this rank's coordinates."""
    import hora

    hora.init()
    return (hora.rank(), hora.size(), hora.local_rank(), hora.local_size(), hora.cross_rank(),
            hora.cross_size())


def collectives(size: int) -> list[str]:
    """Allreduce (sum, min, max), allgather and broadcast of every dtype and size, checked
    against NumPy on this rank; the mismatches found."""
    import hora

    hora.init()
    rank, wrong = hora.rank(), []
    for dtype in DTYPES:
        for count in SIZES:
            mine = rank_data(rank, dtype, count)
            everyone = [rank_data(r, dtype, count) for r in range(size)]
            checks = {
                "sum": (hora.allreduce(mine, op=hora.Sum), np.sum(everyone, axis=0, dtype=dtype)),
                "min": (hora.allreduce(mine, op=hora.Min), np.min(everyone, axis=0)),
                "max": (hora.allreduce(mine, op=hora.Max), np.max(everyone, axis=0)),
                "allgather": (hora.allgather(mine), np.concatenate(everyone)),
                "broadcast": (hora.broadcast(mine, root_rank=size - 1), everyone[-1]),
            }
            for op, (got, expected) in checks.items():
                if got.dtype != expected.dtype or not np.array_equal(got, expected):
                    wrong.append(f"rank {rank} {op} {dtype}[{count}]: {got[:5]} != "
                                 f"{expected[:5]}")
    hora.shutdown()
    return wrong


def fail_on_rank(bad_rank: int) -> int:
    """Rank ``bad_rank`` raises; the others wait in an allreduce it never joins."""
    import hora

    hora.init()
    if hora.rank() == bad_rank:
        raise ValueError(f"boom on rank {bad_rank}")
    hora.allreduce(np.ones(4), name="never_completes")
    return hora.rank()


class RankEcho:
    """An executable: connects in its constructor, answers with its rank times a factor."""

    def __init__(self, factor: int) -> None:
        import hora

        hora.init()
        self.factor = factor

    def rank_times(self) -> int:
        import hora

        return hora.rank() * self.factor


def elastic_training(epochs: int, marker: str, grow_to: int = 0) -> dict[str, Any]:
    """An elastic job: each epoch adds the allreduce-average of ones (1.0 at any size) to the
    committed total; the worker with rank 2 in the first generation SIGKILLs itself at epoch 3
    (once: ``marker`` records it). After the last epoch the job keeps committing, without
    training, until it has ``grow_to`` workers again (at most 600 commits of 0.1 s), so that a
    slow restart of the killed worker's replacement cannot let it finish smaller. Returns the
    final state and this process's id."""
    import hora.torch as hvd
    import torch
    from hora.ray import ray_logger

    hvd.init()
    ray_logger.log({"started": os.getpid()})
    state = hvd.elastic.TorchState(epoch=0, total=0.0)

    @hvd.elastic.run
    def train(state: Any) -> None:
        idle = 0  # commit() is collective: every rank counts the same, so all stop together
        while state.epoch < epochs or (hvd.size() < grow_to and idle < 600):
            if state.epoch < epochs:
                if state.epoch == 3 and hvd.rank() == 2 and not os.path.exists(marker):
                    open(marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)
                state.total += float(hvd.allreduce(torch.ones(1), name="one").item())
                state.epoch += 1
            else:
                idle += 1
            time.sleep(0.1)
            state.commit()  # raises HostsUpdatedInterrupt once the driver grew the job

    train(state)
    return {"total": state.total, "epoch": state.epoch, "size": hvd.size(), "pid": os.getpid()}


def ray_train_loop(config: dict[str, Any]) -> None:
    """A Ray Train loop in Horovod's style: ``hvd.init()`` with no arguments, an allreduce,
    a report with a checkpoint from rank 0; rank ``config["fail_rank"]`` raises instead."""
    import tempfile

    import hora.torch as hvd
    import ray.train
    import torch

    hvd.init()
    if hvd.rank() == config.get("fail_rank", -1):
        raise ValueError(f"boom in Ray Train on rank {hvd.rank()}")
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="total")
    context = ray.train.get_context()
    metrics = {"total": total.item(), "rank": hvd.rank(), "size": hvd.size(),
               "local_rank": hvd.local_rank(), "train_rank": context.get_world_rank()}
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if hvd.rank() == 0:
            torch.save({"total": total}, os.path.join(folder, "state.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report(metrics, checkpoint=checkpoint)


class BrokenExecutable:
    """An executable whose constructor fails (after ``hvd.init()``)."""

    def __init__(self) -> None:
        import hora

        hora.init()
        raise ValueError(f"rank {hora.rank()} cannot build its executable")
