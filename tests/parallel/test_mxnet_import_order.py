"""A script that imports ``mxnet`` before ``hora.mxnet`` works on the supported install.

MXNet 1.9.1 reads ``np.bool`` at import time, which NumPy 1.24+ no longer has; the start-up hook
that Hora installs next to its package (``hora_mxnet_numpy.pth``) restores it before MXNet loads.
The script runs in a fresh single-rank interpreter that sees Hora's directory as a site directory,
as an installed wheel does. Run under ``horarun -np N`` like the other MXNet tests (each rank runs
its own copy of the script; nothing here is collective).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import hora
import pytest
from hora.runner.env import TORCH_NAMES

pytest.importorskip("hora.mxnet", exc_type=ImportError)

SCRIPT = textwrap.dedent("""
    import site
    import sys

    site.addsitedir(sys.argv[1])
    import mxnet as mx
    import numpy as np

    import hora.mxnet as hvd

    hvd.init()
    out = hvd.allreduce(mx.nd.array([1.0, 2.0, 3.0]), op=hvd.Sum, name="import_order")
    assert out.asnumpy().tolist() == [1.0, 2.0, 3.0], out
    assert hvd.size() == 1
    print("import order ok with NumPy", np.__version__)
""")


def _single_rank_env() -> dict[str, str]:
    """This rank's environment without what makes a process join the running job (horarun's
    variables, and torchrun's, which horarun exports too)."""
    torchrun = {*TORCH_NAMES, "MASTER_ADDR", "MASTER_PORT"}
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("HORA_", "HOROVOD_", "OMPI_", "PMI_", "PMIX_"))
            and k not in torchrun}


def test_mxnet_imported_before_hora() -> None:
    site_dir = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))
    assert os.path.exists(os.path.join(site_dir, "hora_mxnet_numpy.pth"))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, site_dir], check=False, env=_single_rank_env(),
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "import order ok" in result.stdout
