"""A peer that dies in the middle of a training step: survivors keep their parameters.

Each test starts its own 3-rank torch job torchrun-style on loopback (no launcher that would kill
the survivors) and bounds every wait. The victim runs its backward pass (its hooks submit the
gradient allreduces, some of which may have started moving data) and dies before the step ends.
The survivors' ``optimizer.step()`` must raise a hora.HoraError, and their parameters must be
exactly what they were before that step.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torchrun_jobs import clean_env, run_job, transcript

pytest.importorskip("torch")

WORKER = r"""
import os
import sys

import torch

import hora
import hora.torch as hvd

hvd.init()
rank = hvd.rank()
victim = int(os.environ["FAULT_VICTIM"])
torch.manual_seed(0)
# Wide enough that the gradient allreduces take a while and are fused in pieces.
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
opt = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
    named_parameters=model.named_parameters(),
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

def backward():
    torch.manual_seed(100 + rank)
    x = torch.randn(32, 256)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()

for _ in range(2):
    backward()
    opt.step()
print(f"READY rank={rank}", flush=True)
before = [p.detach().clone() for p in model.parameters()]
if rank == victim:
    # It dies inside its backward pass, once the later layers' hooks have submitted their
    # gradients (some may start moving data) but before the first layer's weight gradient exists:
    # had it lived to the end of backward, its engine could finish every allreduce of the step.
    model[0].weight.register_hook(lambda grad: os._exit(1))
    backward()
    os._exit(2)  # not reached
try:
    # The victim's death may surface in the backward pass (a hook submitting to a stopped engine)
    # or in step(); either way the step must not change a parameter.
    backward()
    opt.step()
except Exception as exc:
    unchanged = all(torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
    print(
        f"STEP-FAILED rank={rank} horaerror={isinstance(exc, hora.HoraError)} "
        f"unchanged={unchanged} {type(exc).__name__}: {exc}",
        flush=True,
    )
    sys.exit(3)
print(f"UNEXPECTED-SUCCESS rank={rank}", flush=True)
sys.exit(4)
"""

NP = 3
JOB_TIMEOUT_SECONDS = "5"
HANG_SECONDS = 90.0


@pytest.mark.parametrize("victim", [1, 0], ids=["worker_dies", "coordinator_dies"])
def test_survivors_keep_parameters_when_a_peer_dies_mid_step(tmp_path: Path, victim: int) -> None:
    env = clean_env(JOB_TIMEOUT_SECONDS)
    env["FAULT_VICTIM"] = str(victim)
    procs, outputs, hung = run_job(tmp_path, WORKER, NP, env, list(range(NP)), HANG_SECONDS)
    log = transcript(procs, outputs)
    assert not hung, f"ranks {hung} hung for {HANG_SECONDS:.0f} s:\n{log}"
    assert all(f"READY rank={r}" in outputs[r] for r in range(NP)), log
    for r in range(NP):
        if r == victim:
            continue
        assert procs[r].returncode == 3, f"rank {r} did not report a failed step:\n{log}"
        match = re.search(r"STEP-FAILED rank=\d+ horaerror=(\w+) unchanged=(\w+)", outputs[r])
        assert match, log
        assert match.group(1) == "True", f"rank {r} got a non-Hora exception:\n{log}"
        assert match.group(2) == "True", f"rank {r} changed its parameters:\n{log}"
