"""The hierarchical allreduce, run under horarun with ranks on two "hosts" of one machine, e.g.
``HORA_HIERARCHICAL_ALLREDUCE=1 horarun -np 4 -H localhost:2,127.0.0.1:2 python -m pytest THIS``
(horarun treats the two names as two hosts: local and cross ranks follow them).

tests/run_all.sh runs this file, and test_core_allreduce.py (every op, dtype and size against
NumPy), in that set-up at 2 ranks (2 hosts x 1) and 4 ranks (2 hosts x 2).
"""

from __future__ import annotations

import json
import os
import tempfile

import hora
import numpy as np
import pytest
from conftest import (
    DTYPES,
    FLOAT_DTYPES,
    OPS,
    all_inputs,
    assert_close,
    kind_for_op,
    rank,
    reduce_ref,
    resolve_count,
    size,
)


def test_job_spans_hosts_and_asks_for_hierarchical() -> None:
    """The set-up this file needs: more than one host, and the variable set."""
    assert hora.cross_size() > 1, "run this file with ranks on two or more hosts (horarun -H)"
    assert os.environ.get("HORA_HIERARCHICAL_ALLREDUCE") == "1"


def test_timeline_shows_the_hierarchical_path() -> None:
    """Allreduces of the global set run the hierarchical algorithm (its timeline activity); those
    of another process set (here rank 0 alone) keep the flat one."""
    name = f"hora_hier_{os.environ.get('HORA_RENDEZVOUS_PORT', os.getppid())}.json"
    path = os.path.join(tempfile.gettempdir(), name)
    alone = hora.add_process_set([0])
    hora.start_timeline(path)
    hora.allreduce(np.ones(1000, np.float32), op=hora.Sum, name="hier.timeline")
    if rank() == 0:
        hora.allreduce(np.ones(10, np.float32), op=hora.Sum, name="hier.set", process_set=alone)
    hora.barrier()
    hora.stop_timeline()
    hora.remove_process_set(alone)
    if rank() == 0:
        with open(path) as f:
            names = {str(e.get("name")) for e in json.load(f) if isinstance(e, dict)}
        os.unlink(path)
        reductions = sorted(
            n for n in names if n.endswith("_ALLREDUCE") and not n.startswith("NEGOTIATE")
        )
        assert len(reductions) == 2, reductions
        assert reductions[0].endswith("_HIERARCHICAL_ALLREDUCE") != reductions[1].endswith(
            "_HIERARCHICAL_ALLREDUCE"
        ), reductions


def _gathered_bytes(out: np.ndarray, name: str) -> list[bytes]:
    """Every rank's bytes of ``out``."""
    raw = np.ascontiguousarray(out).reshape(1, -1).view(np.uint8)
    return [bytes(row) for row in np.asarray(hora.allgather(raw, name=name))]


@pytest.mark.parametrize("count", [0, 1, 17, 1001, "big"])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_rank_gets_the_same_bytes_alone_and_fused(dtype: str, op: str, count: int | str) -> None:
    """Inexact float inputs: results match NumPy within the tolerance, are bit-identical on every
    rank, and a tensor fused with others gives the same bits as the tensor alone."""
    count = resolve_count(count, dtype)
    inexact = dtype in FLOAT_DTYPES and op in ("sum", "average")
    kind = "normal" if inexact else kind_for_op(op)
    xs = all_inputs(count, dtype, "hier", op, kind=kind)
    tag = f"hier.{op}.{dtype}.{count}"
    alone = hora.allreduce(xs[rank()], op=OPS[op], name=tag)
    assert_close(alone, reduce_ref(xs, op, dtype), dtype)
    assert len(set(_gathered_bytes(alone, tag + ".bytes"))) == 1
    other = all_inputs(33, dtype, "hier.other", op, kind=kind)
    fused = hora.grouped_allreduce([other[rank()], xs[rank()]], op=OPS[op], name=tag + ".g")
    assert fused[1].tobytes() == alone.tobytes()
    assert_close(fused[0], reduce_ref(other, op, dtype), dtype)


def test_prescale_and_postscale() -> None:
    """Scale factors apply around the hierarchical reduction as around the flat one."""
    xs = all_inputs(1001, "float32", "hier.scale", kind="normal")
    out = hora.allreduce(xs[rank()], op=hora.Average, prescale_factor=0.5, postscale_factor=3.0,
                         name="hier.scale")
    assert_close(out, reduce_ref(xs, "average", "float32", 0.5, 3.0), "float32")
    assert size() == hora.local_size() * hora.cross_size()
