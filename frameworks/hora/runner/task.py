"""How ``hora.run`` hands a task to its ranks and gets their results back.

On a host that shares TASK_DIR with the launcher (local ranks) the task is TASK_DIR/func.pkl and
the result goes to TASK_DIR/result.<rank>.pkl. Remote ranks get the task in the environment
(base64 in HORARUN_TASK_0, HORARUN_TASK_1, ..., HORARUN_TASK_CHUNKS chunks, removed before the
function runs) and write the result to stdout as one line: :data:`RESULT_MARK` + base64, which the
launcher takes out of the rank's output.
"""

from __future__ import annotations

import base64
import os
from collections.abc import MutableMapping

RESULT_MARK = b"\x1ehora.run result:"
TASK_PREFIX = "HORARUN_TASK_"
CHUNK_BYTES = 96 * 1024  # one environment string may hold at most 128 KiB
MAX_REMOTE_TASK_BYTES = 1024 * 1024


def encode_task(blob: bytes) -> dict[str, str]:
    """The environment variables that carry ``blob`` to a remote rank.

    Raises:
        ValueError: ``blob`` is larger than :data:`MAX_REMOTE_TASK_BYTES`.
    """
    if len(blob) > MAX_REMOTE_TASK_BYTES:
        raise ValueError(
            f"hora.run: the pickled function and its arguments take {len(blob)} bytes; remote "
            f"hosts can receive at most {MAX_REMOTE_TASK_BYTES}. Load large data inside the "
            "function instead of capturing or passing it.")
    text = base64.b64encode(blob).decode()
    chunks = [text[i:i + CHUNK_BYTES] for i in range(0, len(text), CHUNK_BYTES)] or [""]
    env = {f"{TASK_PREFIX}{i}": chunk for i, chunk in enumerate(chunks)}
    env[f"{TASK_PREFIX}CHUNKS"] = str(len(chunks))
    return env


def take_task(environ: MutableMapping[str, str]) -> bytes | None:
    """The task carried in ``environ`` (its variables are removed), or None when there is none."""
    count = environ.pop(f"{TASK_PREFIX}CHUNKS", None)
    if count is None:
        return None
    text = "".join(environ.pop(f"{TASK_PREFIX}{i}", "") for i in range(int(count)))
    return base64.b64decode(text)


def result_path(task_dir: str, rank: int) -> str:
    """Where a local rank leaves its pickled result."""
    return os.path.join(task_dir, f"result.{rank}.pkl")


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader never sees a partial file."""
    partial = path + ".partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, path)


