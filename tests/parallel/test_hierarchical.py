"""The hierarchical allreduce and allgather, run under horarun with ranks on two "hosts" of one
machine, e.g. ``HORA_HIERARCHICAL_ALLREDUCE=1 HORA_HIERARCHICAL_ALLGATHER=1 horarun -np 4 -H
localhost:2,127.0.0.1:2 python -m pytest THIS`` (horarun treats the two names as two hosts: local
and cross ranks follow them).

tests/run_all.sh runs this file, test_core_allreduce.py (every op, dtype and size against NumPy)
and test_core_allgather.py (every dtype and row pattern) in that set-up at 2 ranks (2 hosts x 1)
and 4 ranks (2 hosts x 2).
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
    """The set-up this file needs: more than one host, and the variables set."""
    assert hora.cross_size() > 1, "run this file with ranks on two or more hosts (horarun -H)"
    assert os.environ.get("HORA_HIERARCHICAL_ALLREDUCE") == "1"
    assert os.environ.get("HORA_HIERARCHICAL_ALLGATHER") == "1"


def test_timeline_shows_the_hierarchical_path() -> None:
    """Allreduces and allgathers of the global set run the hierarchical algorithms (their timeline
    activities); those of another process set (here rank 0 alone) keep the flat ones."""
    name = f"hora_hier_{os.environ.get('HORA_RENDEZVOUS_PORT', os.getppid())}.json"
    path = os.path.join(tempfile.gettempdir(), name)
    alone = hora.add_process_set([0])
    hora.start_timeline(path)
    hora.allreduce(np.ones(1000, np.float32), op=hora.Sum, name="hier.timeline")
    if rank() == 0:
        hora.allreduce(np.ones(10, np.float32), op=hora.Sum, name="hier.set", process_set=alone)
        hora.allgather(np.ones(10, np.float32), name="hier.set.g", process_set=alone)
    hora.allgather(np.ones((rank() + 1, 3), np.float32), name="hier.timeline.g")
    hora.barrier()
    hora.stop_timeline()
    hora.remove_process_set(alone)
    if rank() == 0:
        with open(path) as f:
            names = {str(e.get("name")) for e in json.load(f) if isinstance(e, dict)}
        os.unlink(path)
        for op in ("ALLREDUCE", "ALLGATHER"):
            # The transport's activities (the op's own row is the bare name).
            runs = sorted(n for n in names if n.endswith("_" + op) and "NEGOTIATE" not in n)
            assert len(runs) == 2, runs
            hierarchical = [n.endswith("_HIERARCHICAL_" + op) for n in runs]
            assert sorted(hierarchical) == [False, True], runs


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


@pytest.mark.parametrize("rows", ["even", "uneven", "some_empty"])
def test_allgather_uneven_rows_fused_and_alone(rows: str) -> None:
    """Allgather of blocks of different sizes (some empty), alone and fused, equals the
    concatenation in rank order."""
    counts = {"even": [5] * size(), "uneven": [r * 3 + 1 for r in range(size())],
              "some_empty": [0 if r % 2 else 1001 for r in range(size())]}[rows]
    blocks = [np.arange(c * 2, dtype=np.float64).reshape(c, 2) + 1000 * r
              for r, c in enumerate(counts)]
    expected = np.concatenate(blocks)
    out = hora.allgather(blocks[rank()], name=f"hier.g.{rows}")
    np.testing.assert_array_equal(out, expected)
    other = [np.full((r + 2,), r, np.int32) for r in range(size())]
    fused = hora.grouped_allgather([blocks[rank()], other[rank()]], name=f"hier.gg.{rows}")
    np.testing.assert_array_equal(fused[0], expected)
    np.testing.assert_array_equal(fused[1], np.concatenate(other))
