"""What the launcher tests give the ``horarun`` processes they start: an environment without the
calling job's Hora variables, and SIGINT's default action."""

from __future__ import annotations

import os
import signal

import hora

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))


def child_env(**extra):
    """This process's environment with this checkout's hora first on PYTHONPATH, no HORA_,
    HOROVOD_ or HORARUN_ variables, and ``extra``."""
    result = dict(os.environ)
    result["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [result.get("PYTHONPATH")] if p])
    for key in [k for k in result if k.startswith(("HORA_", "HOROVOD_", "HORARUN_"))]:
        del result[key]
    result.update(extra)
    return result


def default_sigint():
    """In a child before it starts: SIGINT's default action, as under a terminal. A test run
    started as a background job of a shell has SIGINT ignored, and the launcher leaves an ignored
    signal ignored, as nohup expects."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
