"""``horarun -cb`` and ``python -m hora --check-build``: what this installation of Hora can do, in
``horovodrun -cb``'s layout, then the versions it found and what the GPU path loaded.

Frameworks are reported as available when their Python package can be found (located with
``importlib.util.find_spec``, never imported: importing TensorFlow takes seconds), and their
versions are read from the installed distributions' metadata. Hora's built-in TCP transport plays
Gloo's role and is always there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from collections.abc import Mapping
from typing import Any

FRAMEWORKS = (("TensorFlow", "tensorflow"), ("PyTorch", "torch"), ("MXNet", "mxnet"))


def framework_available(module: str) -> bool:
    """True when ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def framework_version(module: str,
                      distributions: Mapping[str, list[str]] | None = None) -> str | None:
    """The installed version of the distribution that provides ``module`` (tensorflow-cpu's for
    ``tensorflow``), or None when none does; nothing is imported."""
    if distributions is None:
        distributions = importlib.metadata.packages_distributions()
    for name in distributions.get(module, []):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def nccl_version_text(code: int) -> str:
    """NCCL's version code as a version: 22303 -> 2.23.3 (2.9 and later), 2708 -> 2.7.8."""
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def gpu_line(info: Mapping[str, Any]) -> str:
    """What the GPU path found (``hora.common.gpu.info()``), in one line."""
    if info["available"]:
        return (f"NCCL {nccl_version_text(int(info['nccl_version']))} ({info['nccl_library']}), "
                f"CUDA runtime ({info['cuda_library']}), {info['devices']} device(s)")
    return f"not available: {info['reason']}"


def versions(distributions: Mapping[str, list[str]] | None = None) -> list[str]:
    """The report's "Versions:" lines: Python, Hora, and each framework found."""
    from hora import _core

    if distributions is None:
        distributions = importlib.metadata.packages_distributions()
    lines = [f"    Python {platform.python_version()}", f"    Hora {_core.version}"]
    for name, module in FRAMEWORKS:
        found = framework_version(module, distributions)
        lines.append(f"    {name} {found}" if found else f"    {name}: not installed")
    return lines


def _row(available: bool, name: str) -> str:
    return f"    [{'X' if available else ' '}] {name}"


def report() -> str:
    """The ``-cb`` text (ends with a newline)."""
    from hora import _core
    from hora.common import gpu

    gpu.ensure_loaded()  # NVIDIA's wheels, when installed, before the engine looks for NCCL
    mpi = bool(_core.mpi_built())
    nccl = bool(_core.nccl_built())
    lines = [f"Hora v{_core.version}:", "", "Available Frameworks:"]
    lines += [_row(framework_available(module), name) for name, module in FRAMEWORKS]
    lines += ["", "Available Controllers:", _row(mpi, "MPI"), _row(True, "Gloo (TCP)")]
    lines += ["", "Available Tensor Operations:", _row(nccl, "NCCL"), _row(False, "DDL"),
              _row(False, "CCL"), _row(mpi, "MPI"), _row(True, "Gloo (TCP)")]
    lines += ["", "Versions:", *versions()]
    lines += ["", "GPU tensors:", "    " + gpu_line(gpu.info())]
    return "\n".join(lines) + "\n"
