"""A process that already ran one job joins the next one: Spark and Ray reuse their Python
workers, so a job's ranks may be fresh processes and processes that ran earlier jobs (and
called ``init()`` before, on another store). Only loopback addresses are used."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap

import hora
from hora import _core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))

# Runs the jobs given on its command line one after the other: "rank,size,port,secret" each.
WORKER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import hora
    for job in sys.argv[1:]:
        rank, size, port, secret = job.split(",")
        os.environ.update({"HORA_RANK": rank, "HORA_SIZE": size, "HORA_SECRET": secret,
                           "HORA_RENDEZVOUS_ADDR": "127.0.0.1", "HORA_RENDEZVOUS_PORT": port})
        hora.init()
        total = hora.allreduce(np.ones(3) * (hora.rank() + 1), op=hora.Sum, name="t")
        print(port, hora.rank(), total.tolist(), flush=True)
        hora.shutdown()
""")


def _start(*jobs: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    env.update({"PYTHONPATH": os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")])),
                "HORA_START_TIMEOUT": "10"})
    return subprocess.Popen([sys.executable, "-c", WORKER, *jobs], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_process_that_ran_a_job_joins_the_next_with_a_fresh_one() -> None:
    secret = secrets.token_hex(16)
    first, second = (_core.StoreServer("127.0.0.1", 0, secret) for _ in range(2))
    try:
        job1, job2 = (f"{{}},2,{s.port},{secret}" for s in (first, second))
        reused = _start(job1.format(0), job2.format(0))  # two inits before the second job's
        others = [_start(job1.format(1)), _start(job2.format(1))]
        outputs = [p.communicate(timeout=60) for p in [reused, *others]]
        for process, (out, err) in zip([reused, *others], outputs):
            assert process.returncode == 0, err[-2000:]
        assert outputs[0][0].split("\n")[:2] == [f"{first.port} 0 [3.0, 3.0, 3.0]",
                                                 f"{second.port} 0 [3.0, 3.0, 3.0]"]
    finally:
        first.stop()
        second.stop()
