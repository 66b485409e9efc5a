"""The real NCCL and CUDA runtime wheels (nvidia-nccl-cu12, nvidia-cuda-runtime-cu12) on a
machine without a GPU driver: they load, NCCL reports its version, and the GPU path turns itself
off with the reason, while CPU collectives go on as before.

HORA_TEST_NVIDIA_SITE names the directory the wheels are installed in (tests/run_all.sh's gpu
stage installs them there); each case runs in a fresh interpreter, since a process resolves its
libraries once.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, numpy as np, hora
from hora.common import gpu
info = gpu.info()
info["nccl_built"] = hora.nccl_built()
info["cuda_built"] = hora.cuda_built()

class CudaLike:
    def __dlpack_device__(self):
        return (2, 0)
    def __dlpack__(self, stream=None, **kwargs):
        raise AssertionError("must be refused before export")

hora.init()
try:
    hora.allreduce_(CudaLike(), name="gpu.tensor")
    info["refusal"] = ""
except ValueError as e:
    info["refusal"] = str(e)
cpu = np.ones(3, np.float32)
hora.allreduce_(cpu, op=hora.Sum, name="cpu.tensor")
info["cpu_result"] = cpu.tolist()
hora.shutdown()
print("PROBE " + json.dumps(info))
"""


def site() -> Path:
    path = os.environ.get("HORA_TEST_NVIDIA_SITE")
    if not path or not (Path(path) / "nvidia" / "nccl" / "lib" / "libnccl.so.2").is_file():
        pytest.fail("set HORA_TEST_NVIDIA_SITE to a directory holding nvidia-nccl-cu12 and "
                    "nvidia-cuda-runtime-cu12 (pip install -t DIR ...); tests/run_all.sh --only "
                    "gpu does this")
    return Path(path)


def probe(extra_env: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HORA_NCCL_LIBRARY", "HORA_CUDA_LIBRARY")}
    env["PYTHONPATH"] = os.pathsep.join([str(site()), env.get("PYTHONPATH", "")])
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", PROBE], check=False, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")][-1]
    return json.loads(line[len("PROBE "):])


def test_wheels_load_and_no_driver_turns_the_gpu_path_off() -> None:
    info = probe({})
    assert info["nccl_loaded"], info
    assert info["nccl_version"] >= 21000, info  # the wheel's NCCL answered ncclGetVersion
    assert "libnccl.so.2" in info["nccl_library"] and "libcudart" in info["cuda_library"], info
    assert not info["available"] and info["devices"] == 0, info
    assert "no usable CUDA device" in info["reason"], info
    assert info["nccl_built"] == 0 and info["cuda_built"] is False, info
    assert "GPU path of Hora is off" in info["refusal"], info
    assert "no usable CUDA device" in info["refusal"], info
    assert info["cpu_result"] == [1.0, 1.0, 1.0], info


def test_missing_cuda_runtime_is_named() -> None:
    info = probe({"HORA_CUDA_LIBRARY": "/nonexistent/libcudart.so.12"})
    assert info["nccl_loaded"] and not info["available"], info
    assert "the CUDA runtime is not available" in info["reason"], info
    assert "HORA_CUDA_LIBRARY" in info["reason"], info


def test_missing_nccl_is_named() -> None:
    info = probe({"HORA_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    assert not info["nccl_loaded"] and not info["available"], info
    assert "NCCL is not available" in info["reason"], info


def test_horarun_check_build_reports_no_nccl() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site()), env.get("PYTHONPATH", "")])
    env.pop("HORA_NCCL_LIBRARY", None)
    env.pop("HORA_CUDA_LIBRARY", None)
    out = subprocess.run([sys.executable, "-m", "hora.runner.launch", "-cb"], check=False, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "[ ] NCCL" in out.stdout, out.stdout
