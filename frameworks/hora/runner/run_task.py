"""One rank of ``hora.run``: ``python -m hora.runner.run_task TASK_DIR``.

Loads the pickled ``(func, args, kwargs)`` (see ``task`` for how it travels), calls the function
and hands the pickled result back. The function decides for itself whether to call
``hora.init()``. A function that raises makes the rank exit with 1 after printing the traceback
(``sys.exit(n)`` in the function exits with n).
"""

from __future__ import annotations

import base64
import os
import sys
import traceback
from collections.abc import Mapping, Sequence

from hora.runner.task import RESULT_MARK, result_path, take_task, write_file


def _rank(environ: Mapping[str, str]) -> int:
    return int(environ.get("HORA_RANK") or environ.get("HOROVOD_RANK") or "0")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the task; returns the exit code (0, or 1 when the function raised)."""
    import cloudpickle

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m hora.runner.run_task TASK_DIR", file=sys.stderr)
        return 2
    task_dir = args[0]
    result_channel = os.fdopen(os.dup(1), "wb")  # kept even if the function redirects fd 1
    blob = take_task(os.environ)
    remote = blob is not None
    if blob is None:
        with open(os.path.join(task_dir, "func.pkl"), "rb") as f:
            blob = f.read()
    try:
        func, func_args, func_kwargs = cloudpickle.loads(blob)
        result = cloudpickle.dumps(func(*func_args, **func_kwargs))
    except Exception:  # noqa: BLE001 (reported, then the rank fails)
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    if remote:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        result_channel.write(RESULT_MARK + base64.b64encode(result) + b"\n")
        result_channel.flush()
    else:
        write_file(result_path(task_dir, _rank(os.environ)), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
