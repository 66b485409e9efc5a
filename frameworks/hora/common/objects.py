"""Broadcast and allgather of arbitrary picklable Python objects (over uint8 tensors).

Unpickling runs code chosen by whoever wrote the bytes, so these functions execute what peers
send. That is safe only because every peer is a rank of this job: each connection the bytes
travel over passed the handshake that proves the job secret (or, on the loopback, comes from this
host; or MPI connected the ranks). Under ``HORA_INSECURE=1`` anyone who reaches the job's ports at
start-up can take a rank's place and so run code in every rank that calls these functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hora.common import basics, ops
from hora.common.process_sets import ProcessSet, global_process_set

try:
    import cloudpickle as _pickle
except ImportError:  # cloudpickle is a dependency; plain pickle covers most objects without it
    import pickle as _pickle  # type: ignore[no-redef]


def _dumps(obj: Any) -> np.ndarray:
    return np.frombuffer(_pickle.dumps(obj), dtype=np.uint8).copy()


def _run(collective: str, tensor: np.ndarray, name: str, *, root_rank: int = 0,
         process_set: ProcessSet) -> Any:
    handle = ops.enqueue(collective, [tensor], names=[name], root_rank=root_rank,
                         process_set=process_set)[0]
    handle.wait()
    return ops.handle_output(handle)


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Send ``obj`` from ``root_rank`` to every rank of the set; returns the root's object.

    The object is cloudpickled, its size broadcast as ``broadcast.<name>.sz``, then its bytes as
    ``broadcast.<name>.t``; ``name`` defaults to the type name of ``obj``. Non-root ranks
    unpickle the root's bytes: trust in them rests on the job's authenticated connections (see the
    module docstring).
    """
    name = name or type(obj).__name__
    is_root = basics.rank() == root_rank
    payload = _dumps(obj) if is_root else None
    size = np.array([len(payload) if payload is not None else 0], dtype=np.int64)
    _run("broadcast", size, ops.op_name("broadcast", name + ".sz"), root_rank=root_rank,
         process_set=process_set)
    if payload is None:
        payload = np.zeros(int(size[0]), dtype=np.uint8)
    _run("broadcast", payload, ops.op_name("broadcast", name + ".t"), root_rank=root_rank,
         process_set=process_set)
    return obj if is_root else _pickle.loads(payload.tobytes())


def allgather_object(obj: Any, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list:
    """Gather ``obj`` from every rank of the set; returns the objects in set-rank order.

    Sizes are allgathered as ``allgather.<name>.sz``, then the bytes as ``allgather.<name>.t``;
    ``name`` defaults to the type name of ``obj``. Every rank unpickles every other rank's bytes:
    trust in them rests on the job's authenticated connections (see the module docstring).
    """
    name = name or type(obj).__name__
    payload = _dumps(obj)
    sizes = _run("allgather", np.array([len(payload)], dtype=np.int64),
                 ops.op_name("allgather", name + ".sz"), process_set=process_set)
    gathered = _run("allgather", payload, ops.op_name("allgather", name + ".t"),
                    process_set=process_set)
    result = []
    offset = 0
    for n in (int(s) for s in sizes):
        result.append(_pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return result
