"""What hora.nccl_built(), hora.cuda_built() and `horarun -cb` report with the emulation loaded
(HORA_NCCL_LIBRARY / HORA_CUDA_LIBRARY set, as in tests/run_all.sh's gpu stage), and without any
NCCL at all."""
from __future__ import annotations

import os
import subprocess
import sys

import hora
from hora.common import gpu


def test_emulation_counts_as_nccl_and_cuda() -> None:
    assert os.environ.get("HORA_NCCL_LIBRARY"), "run with the emulation (tests/run_all.sh gpu)"
    info = gpu.info()
    assert info["available"] and info["reason"] == "", info
    assert hora.nccl_built() == info["nccl_version"] == 22303
    assert hora.cuda_built() is True


def check_build(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "hora.runner.launch", "-cb"], check=False, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_horarun_check_build_follows_what_loads() -> None:
    loaded = check_build(dict(os.environ))
    assert "[X] NCCL" in loaded
    # The emulation's version, its library and its devices.
    library = os.environ["HORA_NCCL_LIBRARY"]
    assert f"\nGPU tensors:\n    NCCL 2.23.3 ({library}), CUDA runtime (" in loaded
    without = dict(os.environ, HORA_NCCL_LIBRARY="/nonexistent/libnccl.so.2")
    missing = check_build(without)
    assert "[ ] NCCL" in missing
    assert "\nGPU tensors:\n    not available: NCCL is not available" in missing


BF16_PROBE = """
import sys
sys.path.insert(0, {here!r})
import numpy as np, hora
from emulated_tensor import EmuTensor
hora.init()
t = EmuTensor(np.zeros(4, np.uint16).shape, np.uint16, bf16=True)
for op in (hora.allreduce_, hora.broadcast_):
    try:
        op(t, **({{"root_rank": 0}} if op is hora.broadcast_ else {{}}), name=op.__name__)
        print(op.__name__, "ran")
    except hora.NotSupportedError as e:
        print(op.__name__, "refused:", e)
print("versions", hora.nccl_built())
hora.shutdown()
"""


def test_nccl_before_2_10_cannot_reduce_bfloat16() -> None:
    env = dict(os.environ, HORA_EMU_NCCL_VERSION="20905")
    code = BF16_PROBE.format(here=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True,
                         text=True, timeout=60)
    text = out.stdout + out.stderr
    assert "allreduce_ refused:" in text and "cannot reduce bfloat16" in text, text
    assert "NCCL 2.9.5" in text, text
    assert "broadcast_ ran" in text, text  # moving bytes needs no bfloat16 type
    assert "versions 20905" in text, text


def test_nccl_before_2_7_turns_the_gpu_path_off() -> None:
    env = dict(os.environ, HORA_EMU_NCCL_VERSION="20603")
    out = subprocess.run([sys.executable, "-c", "from hora.common import gpu; print(gpu.info())"],
                         check=False, env=env, capture_output=True, text=True, timeout=60)
    assert "older than 2.7" in out.stdout and "'available': False" in out.stdout, out.stdout
