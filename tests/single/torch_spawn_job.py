"""A job that torch.multiprocessing.spawn starts, as a user writes it: no Hora import anywhere,
``init_process_group("hora", init_method=..., rank=..., world_size=...)`` in every process.

``python torch_spawn_job.py NP INIT_METHOD [INIT_METHOD ...]``: NP ranks run one round per
init method (init, checks, destroy); each rank prints one line per round with what it saw.
With ``SPAWN_JOB_HORA_FIRST=1`` each rank calls ``hora.init()`` first and reports whether
``init_process_group`` accepted that.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def hora_first(rank: int, size: int, init_method: str) -> str:
    """``hvd.init()`` before ``init_process_group``, where nothing told Hora its place: each
    process is a job of one, which torch's rank and size contradict."""
    import hora

    hora.init()
    try:
        dist.init_process_group("hora", init_method=init_method, rank=rank, world_size=size)
    except ValueError as exc:
        return f"refused: {exc}"
    return "accepted"


def one_round(rank: int, size: int, init_method: str) -> str:
    if os.environ.get("SPAWN_JOB_HORA_FIRST"):
        return hora_first(rank, size, init_method)
    dist.init_process_group("hora", init_method=init_method, rank=rank, world_size=size)
    total = torch.full((5,), float(rank + 1))
    dist.all_reduce(total)
    received = torch.empty(1)
    sent = dist.isend(torch.tensor([float(rank)]), dst=(rank + 1) % size)
    dist.recv(received, src=(rank - 1) % size)
    sent.wait()
    import hora  # the backend has started it by now

    line = (f"backend {dist.get_backend()} size {dist.get_world_size()} sum "
            f"{total[0].item():g} from_left {received.item():g} hora {hora.rank()}/{hora.size()} "
            f"local {hora.local_rank()}/{hora.local_size()}")
    dist.destroy_process_group()
    assert not hora.is_initialized(), "Hora should stop with the default group"
    return line


def main(rank: int, size: int, init_methods: list[str]) -> None:
    for init_method in init_methods:
        # One write per line: the ranks share the pipe, and print() may split a line in two.
        os.write(1, f"rank {rank}: {one_round(rank, size, init_method)}\n".encode())


if __name__ == "__main__":
    assert not any(name == "hora" or name.startswith("hora.") for name in sys.modules)
    nprocs = int(sys.argv[1])
    mp.spawn(main, args=(nprocs, sys.argv[2:]), nprocs=nprocs)
