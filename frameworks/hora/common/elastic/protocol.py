"""What the elastic driver (``horarun`` with elastic flags) and its workers agree on.

The driver serves a control store under the job secret. For each generation ``g`` of the job
(every re-formation is a new one) it publishes, in this order:

- ``elastic/gen/<g>/worker/<id>``: the JSON coordinates of each worker in ``g``
  (rank, size, local and cross coordinates, and the port of ``g``'s rendezvous store);
- ``elastic/generation``: ``g``, the newest generation;
- ``elastic/gen/<g>/ready``: present once ``g`` is complete.

Each generation has its own rendezvous store, whose secret is derived from the job secret and
``g`` (:func:`generation_secret`). The engine of a worker of generation ``g`` proves that secret on
every connection, so a worker of an older generation cannot reach a newer generation's store or
ranks, and the driver stops an older generation's store once a newer one is published.

A started worker sets ``elastic/worker/<id>/ready`` when its ``init()`` first asks for a place:
the driver adds new workers to a generation only once they are ready, so the running workers do
not wait for a new process to import its framework. The value is the generation the worker waits
to follow (-1 at first; ``g`` once it left ``g`` to re-form).

A worker whose engine started in generation ``g`` sets ``elastic/worker/<id>/formed`` to ``g``.
When a worker finishes (exit code 0), the workers that did not form the same generation are no
longer needed and the driver stops them. A worker that left that generation to re-form cannot
finish (no newer generation can form without the finished worker): the driver stops it, and the
job fails, naming it.

A worker that lost its generation without the driver noticing (an error with every process
alive) adds 1 to ``elastic/gen/<g>/reset``; the driver then forms a new generation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json

GENERATION_KEY = "elastic/generation"


def worker_key(generation: int, worker_id: str) -> str:
    """Key of one worker's coordinates in ``generation``."""
    return f"elastic/gen/{generation}/worker/{worker_id}"


def ready_key(generation: int) -> str:
    """Key set once ``generation`` is completely published."""
    return f"elastic/gen/{generation}/ready"


def started_key(worker_id: str) -> str:
    """Key a worker sets once it is ready to join a generation; its value is the generation the
    worker waits to follow."""
    return f"elastic/worker/{worker_id}/ready"


def formed_key(worker_id: str) -> str:
    """Key holding the newest generation this worker formed (its engine started in it)."""
    return f"elastic/worker/{worker_id}/formed"


def reset_key(generation: int) -> str:
    """Counter of reset requests made by the workers of ``generation``."""
    return f"elastic/gen/{generation}/reset"


def generation_secret(job_secret: str, generation: int) -> str:
    """The secret of ``generation``'s rendezvous store and connections (hex HMAC-SHA256)."""
    message = f"hora-elastic-generation-{generation}".encode()
    return hmac.new(job_secret.encode(), message, hashlib.sha256).hexdigest()


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A worker's place in one generation."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    store_port: int

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @staticmethod
    def decode(data: bytes) -> Assignment:
        """Raises ValueError on a malformed value."""
        try:
            fields = json.loads(data.decode())
            return Assignment(**{f.name: int(fields[f.name])
                                 for f in dataclasses.fields(Assignment)})
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"malformed elastic assignment {data!r}: {exc}") from None
