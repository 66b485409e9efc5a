"""An elastic torch training job for the elastic job tests (started by horarun).

Every rank trains the same small model on the same deterministic batches, so the averaged
gradient equals the one-process gradient (each worker starts from its own random weights, which
only a correct sync replaces by worker 0's) and the parameters after N committed steps are known
(``reference_params``). Environment:

- ``ELASTIC_STEPS``: steps to train (default 24); a commit after every ``ELASTIC_COMMIT`` steps.
  ``ELASTIC_STEPS_<worker>`` overrides it for one worker (a script whose workers disagree).
- ``ELASTIC_KILLS``: ``worker:step:phase`` items; that worker SIGKILLs itself at that step in
  ``negotiation`` (right after submitting the step's allreduce), ``collective`` (inside a large
  allreduce every rank runs at that step) or ``commit`` (after saving, before the host check).
- ``ELASTIC_OUT``: directory for ``pid.<worker>`` (at start), ``progress`` (latest step and size
  per worker) and ``final.<worker>.json`` (at the end).
- ``ELASTIC_STEP_SECONDS``: sleep per step (default 0.05), so the tests can act between steps.
- ``ELASTIC_HOLD``: ``step:size`` items, comma-separated; at that step the job commits (without
  training) every 0.1 s until it has exactly ``size`` workers, so a test can wait for growth or
  shrinking at a known point.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import hora.torch as hvd
import torch

WORKER = os.environ.get("HORA_ELASTIC_WORKER_ID", "")
STEPS = int(os.environ.get(f"ELASTIC_STEPS_{WORKER}", os.environ.get("ELASTIC_STEPS", "24")))
COMMIT_EVERY = int(os.environ.get("ELASTIC_COMMIT", "2"))
STEP_SECONDS = float(os.environ.get("ELASTIC_STEP_SECONDS", "0.05"))
OUT = os.environ.get("ELASTIC_OUT", ".")


def kills() -> dict[int, str]:
    """step -> phase for this worker."""
    result = {}
    for item in filter(None, os.environ.get("ELASTIC_KILLS", "").split(",")):
        worker, step, phase = item.split(":")
        if worker == WORKER:
            result[int(step)] = phase
    return result


def all_kill_steps(phase: str) -> set[int]:
    return {int(item.split(":")[1]) for item in
            filter(None, os.environ.get("ELASTIC_KILLS", "").split(","))
            if item.split(":")[2] == phase}


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randn(8, 4, generator=gen), torch.randn(8, 1, generator=gen)


def make_model(worker: str = "0") -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Every worker starts from other weights: only a sync from a worker holding the committed
    state (worker 0's weights at first) gives the reference parameters."""
    torch.manual_seed(7 + int(worker or 0))
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)


def reference_params(steps: int) -> list[float]:
    """The parameters one process reaches after ``steps`` steps."""
    model, optimizer = make_model()
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return flat(model)


def flat(model: torch.nn.Module) -> list[float]:
    return [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def note(line: str) -> None:
    with open(os.path.join(OUT, "progress"), "a") as f:
        f.write(line + "\n")


def write_pid() -> None:
    """``pid.<worker>``: the tests check that no worker outlives the launcher."""
    with open(os.path.join(OUT, f"pid.{WORKER}"), "w") as f:
        f.write(str(os.getpid()))


def main() -> None:
    write_pid()
    my_kills = kills()
    collective_steps = all_kill_steps("collective")
    holds = {int(step): int(size) for step, size in
             (item.split(":") for item in os.environ.get("ELASTIC_HOLD", "").split(",") if item)}
    model, optimizer = make_model(WORKER)  # before init(): the first optimizer takes seconds to build
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        while state.step < STEPS:
            step = state.step
            if step in holds and hvd.size() != holds[step]:
                time.sleep(0.1)
                state.commit()
                continue
            x, y = batch(step)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            if my_kills.get(step) == "negotiation":
                hvd.allreduce_async(torch.ones(3), name=f"probe.{step}")
                die()
            if step in collective_steps:
                big = torch.ones(4 << 20)
                handle = hvd.allreduce_async_(big, name=f"big.{step}")
                if my_kills.get(step) == "collective":
                    time.sleep(0.02)
                    die()
                hvd.synchronize(handle)
            optimizer.step()
            state.step = step + 1
            time.sleep(STEP_SECONDS)
            note(f"{time.time():.3f} worker {WORKER} rank {hvd.rank()} size {hvd.size()} "
                 f"step {state.step}")
            if state.step % COMMIT_EVERY == 0:
                if my_kills.get(step) == "commit":
                    state.save()
                    die()
                state.commit()

    train(state)
    result = {"worker": WORKER, "rank": hvd.rank(), "size": hvd.size(), "step": state.step,
              "params": flat(model), "resets": resets}
    with open(os.path.join(OUT, f"final.{WORKER}.json"), "w") as f:
        json.dump(result, f)
    note(f"{time.time():.3f} worker {WORKER} done")


if __name__ == "__main__":
    main()
