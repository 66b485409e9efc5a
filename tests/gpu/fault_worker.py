"""One rank of a GPU fault scenario (test_gpu_faults.py): allreduces on emulated GPU tensors.

Prints "OK rank=R" after every step, or "FAILED rank=R <error class>: <message>" and exits 3 when
an operation fails. With GPU_FAULT_DIE=R, rank R kills itself (SIGKILL) while its second
allreduce is pending on the device (GPU_FAULT_DIE_DELAY seconds after enqueueing it, default 0).
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import hora
from emulated_tensor import EmuTensor


def say(line: str) -> None:
    """One whole line in one write: the engine logs to the same pipe from other threads, and
    print() writes the text and its newline separately when Python runs unbuffered."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    hora.init()
    me = hora.rank()
    die = int(os.environ.get("GPU_FAULT_DIE", "-1"))
    for step in range(3):
        t = EmuTensor.from_numpy(np.full(256, me, np.float32), device=hora.local_rank())
        try:
            handle = hora.allreduce_async_(t, op=hora.Sum, name=f"step{step}")
            if step == 1 and me == die:
                time.sleep(float(os.environ.get("GPU_FAULT_DIE_DELAY", "0")))
                os.kill(os.getpid(), signal.SIGKILL)
            hora.synchronize(handle)
        except hora.HoraError as e:
            say(f"FAILED rank={me} {type(e).__name__}: {e}")
            return 3
        say(f"OK rank={me} step={step}")
    hora.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
