"""One rank of a chaos "optimizer" scenario: hora.torch.DistributedOptimizer trains a small model
for CHAOS_STEPS steps, and the victim rank (CHAOS_VICTIM) SIGKILLs itself CHAOS_DELAY seconds
after step CHAOS_STEP began, so the kill lands somewhere in a later forward, backward or step.

A survivor whose step fails prints whether its parameters are exactly those from before the
failed step (PARAMS rank=R unchanged=True|False), then the sockets it holds after
hora.torch.shutdown(), and exits with 3. The job runs without a launcher (see run_chaos.py), so
no launcher stops a survivor before it has reported.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import hora.torch as hvd
import torch
import worker_sockets
from report_line import say

VICTIM = int(os.environ.get("CHAOS_VICTIM", "-1"))
STEP = int(os.environ.get("CHAOS_STEP", "0"))
DELAY = float(os.environ.get("CHAOS_DELAY", "0"))
STEPS = int(os.environ.get("CHAOS_STEPS", "3"))

hvd.init()
rank = hvd.rank()
torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
say(f"READY rank={rank}")
data = torch.randn(16, 32, generator=torch.Generator().manual_seed(rank))
before: list[torch.Tensor] = []
try:
    for step in range(STEPS):
        before = [p.detach().clone() for p in model.parameters()]
        if rank == VICTIM and step == STEP:
            timer = threading.Timer(DELAY, lambda: (say(f"VICTIM-ACTS rank={rank}"),
                                                    os.kill(os.getpid(), 9)))
            timer.daemon = True
            timer.start()
        optimizer.zero_grad()
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()
    if rank == VICTIM:
        time.sleep(DELAY + 30.0)  # the kill lands after the last step at the latest
    hvd.shutdown()
    say(f"DONE rank={rank}")
    sys.exit(0)
except hvd.HoraError as exc:
    text = " ".join(str(exc).split())
    say(f"FAILED rank={rank} {type(exc).__name__}: {text}")
    unchanged = all(torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
    say(f"PARAMS rank={rank} unchanged={unchanged}")
    hvd.shutdown()
    worker_sockets.report(rank)
    sys.exit(3)
