"""``horarun -cb``: what this installation of Hora can do, in ``horovodrun -cb``'s layout.

Frameworks are reported as available when their Python package can be found (located with
``importlib.util.find_spec``, never imported: importing TensorFlow takes seconds). Hora's built-in
TCP transport plays Gloo's role and is always there.
"""

from __future__ import annotations

import importlib.util

FRAMEWORKS = (("TensorFlow", "tensorflow"), ("PyTorch", "torch"), ("MXNet", "mxnet"))


def framework_available(module: str) -> bool:
    """True when ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


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
    return "\n".join(lines) + "\n"
