"""The hierarchical allreduce of GPU tensors (HORA_HIERARCHICAL_ALLREDUCE), against NumPy.

Runs under ``horarun -np N -H localhost:N/2,127.0.0.1:N/2`` with HORA_HIERARCHICAL_ALLREDUCE=1 and
the CPU emulation of CUDA and NCCL (tests/run_all.sh's gpu stage): two "hosts" of one or two
ranks, NCCL (emulated) within each, the CPU transport across them.
"""
from __future__ import annotations

import json
import os
import tempfile

import hora
import ml_dtypes
import numpy as np
import pytest
from emulated_tensor import device_values, emu, rank_data, read

SIZES = [0, 1, 17, 1001, 20000]  # odd ones are not divisible by 2 ranks per host; 20000 float32
DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
OPS = [hora.Sum, hora.Average, hora.Min, hora.Max, hora.Product]


@pytest.fixture(scope="module", autouse=True)
def engine():
    hora.init()
    yield
    hora.shutdown()


def reference(op: int, arrays: list[np.ndarray], dtype: str, prescale: float = 1.0,
              postscale: float = 1.0) -> np.ndarray:
    """Exact: each input times the prescale factor, reduced in float64 / int64, times the
    postscale factor (Average: divided by the count), integers truncated toward zero."""
    floating = dtype in ("float16", "bfloat16", "float32", "float64")
    wide = [a.astype(np.float64 if floating else np.int64) * prescale for a in arrays]
    if op in (hora.Sum, hora.Average):
        total = np.sum(wide, axis=0)
    elif op == hora.Min:
        total = np.min(wide, axis=0)
    elif op == hora.Max:
        total = np.max(wide, axis=0)
    else:
        total = np.prod(wide, axis=0)
    total = total * postscale
    if op == hora.Average:
        total = total / len(arrays)
    if not floating:
        total = np.fix(total)
    return total.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def check(actual: np.ndarray, expected: np.ndarray) -> None:
    """Exact: the inputs are small integers, so no dtype rounds (scale factors are powers of 2)."""
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual.astype(np.float64), expected.astype(np.float64))


def test_job_spans_hosts_and_asks_for_hierarchical() -> None:
    """The set-up this file needs: two hosts with the same number of ranks, the variable set."""
    assert hora.cross_size() == 2 and hora.size() == 2 * hora.local_size()
    assert os.environ.get("HORA_HIERARCHICAL_ALLREDUCE") == "1"


def test_timeline_shows_the_hierarchical_steps() -> None:
    """A GPU allreduce of the global set runs the host steps (NCCL reduce-scatter, host copy,
    cross-host allreduce, NCCL allgather; with a prescale factor, a round trip of the inputs
    through host memory first), never the flat NCCL allreduce; one of another process set (here
    rank 0 alone) keeps the flat path."""
    name = f"hora_gpu_hier_{os.environ.get('HORA_RENDEZVOUS_PORT', os.getppid())}.json"
    path = os.path.join(tempfile.gettempdir(), name)
    alone = hora.add_process_set([0])
    hora.start_timeline(path)
    hora.allreduce_(emu(np.ones(1001, np.float32)), op=hora.Sum, name="gh.timeline")
    hora.allreduce_(emu(np.ones(9, np.float32)), op=hora.Sum, prescale_factor=2.0,
                    name="gh.timeline.scaled")
    if hora.rank() == 0:
        hora.allreduce_(emu(np.ones(10, np.float32)), op=hora.Sum, name="gh.set",
                        process_set=alone)
    hora.barrier()
    hora.stop_timeline()
    hora.remove_process_set(alone)
    if hora.rank() != 0:
        return
    with open(path) as f:
        events = [e for e in json.load(f) if isinstance(e, dict)]
    os.unlink(path)
    names = {str(e.get("name")) for e in events}
    for step in ("MEMCPY_IN_FUSION_BUFFER", "PRESCALE_IN_HOST_BUFFER", "NCCL_REDUCESCATTER",
                 "MEMCPY_IN_HOST_BUFFER",
                 "MEMCPY_OUT_HOST_BUFFER", "NCCL_ALLGATHER", "MEMCPY_OUT_FUSION_BUFFER"):
        assert step in names, names
    # Across hosts: TCP when the hosts do not share memory (HORA_SHM_HOST_BY_NAME), else the
    # job's shared memory.
    across = "TCP" if os.environ.get("HORA_SHM_HOST_BY_NAME") == "1" else "SHM"
    assert f"{across}_ALLREDUCE" in names, names
    assert "NCCL_ALLREDUCE" in names, names  # the other set's flat allreduce, and only it
    flat = [e for e in events if e.get("name") == "NCCL_ALLREDUCE" and e.get("ph") == "B"]
    assert len(flat) == 1, flat


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_allreduce(dtype: str, op: int) -> None:
    n, me = hora.size(), hora.rank()
    for i, size in enumerate(SIZES):
        datas = [rank_data(r, 7 + i, (size,), dtype) for r in range(n)]
        if op == hora.Product:
            datas = [np.clip(d.astype(np.int8), -1, 2).astype(d.dtype) for d in datas]
        t = emu(datas[me])
        hora.allreduce_(t, op=op, name=f"gh.{dtype}.{op}.{size}")
        check(read(t, dtype), reference(op, datas, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_allreduce_fuses(dtype: str) -> None:
    """Fused tensors (odd sizes, empty, one larger than the fusion threshold) in one response."""
    n, me = hora.size(), hora.rank()
    shapes = [(3, 5), (0,), (1,), (20000,), (7,)]
    datas = [[rank_data(r, 40 + k, s, dtype) for k, s in enumerate(shapes)] for r in range(n)]
    tensors = [emu(d) for d in datas[me]]
    hora.grouped_allreduce_(tensors, op=hora.Average, name=f"gh.group.{dtype}")
    for k, t in enumerate(tensors):
        check(read(t, dtype), reference(hora.Average, [datas[r][k] for r in range(n)], dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_scale_factors(dtype: str, op: int) -> None:
    """Prescale scales every input before the reduction, postscale the result (powers of two:
    exact). Inputs in -1..1 so that products of scaled inputs fit in int8."""
    n, me = hora.size(), hora.rank()
    pre, post = (2.0, 0.5) if dtype in ("int8", "uint8", "int32", "int64") else (0.5, 4.0)
    for size in (1, 1001):
        datas = [np.clip(rank_data(r, 70 + size, (size,), dtype).astype(np.float64), -1, 1)
                 .astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype) for r in range(n)]
        t = emu(datas[me])
        hora.allreduce_(t, op=op, prescale_factor=pre, postscale_factor=post,
                        name=f"gh.scale.{dtype}.{op}.{size}")
        check(read(t, dtype), reference(op, datas, dtype, pre, post))


def test_negative_prescale_scales_each_input() -> None:
    """Min of x * -1 is -Max(x): the factor applies to the inputs, not to a reduced value."""
    n, me = hora.size(), hora.rank()
    datas = [rank_data(r, 80, (257,), "float32") for r in range(n)]
    t = emu(datas[me])
    hora.allreduce_(t, op=hora.Min, prescale_factor=-1.0, name="gh.scale.negative")
    check(read(t, "float32"), -np.max(datas, axis=0))


def test_scale_factors_outside_the_global_set_are_refused() -> None:
    """Another process set runs the flat NCCL path, which has no kernel to scale with."""
    alone = hora.add_process_set([0])
    if hora.rank() == 0:
        with pytest.raises(hora.NotSupportedError, match="prescale and postscale"):
            hora.allreduce_(emu(np.ones(4, np.float32)), op=hora.Sum, prescale_factor=2.0,
                            name="gh.scale.flat", process_set=alone)
    hora.remove_process_set(alone)


def test_many_steps_in_flight() -> None:
    """Several handles pending at once: each hierarchical allreduce waits for the one before."""
    n, me = hora.size(), hora.rank()
    datas = [[rank_data(r, 90 + k, (333 + k,), "float32") for k in range(6)] for r in range(n)]
    tensors = [emu(d) for d in datas[me]]
    handles = [hora.allreduce_async_(t, op=hora.Sum, name=f"gh.async.{k}")
               for k, t in enumerate(tensors)]
    for k, h in enumerate(handles):
        hora.synchronize(h)
        check(read(tensors[k], "float32"),
              reference(hora.Sum, [datas[r][k] for r in range(n)], "float32"))


def test_other_collectives_keep_the_flat_path() -> None:
    """Only allreduce is hierarchical: an allgather of GPU tensors still runs (flat NCCL)."""
    n, me = hora.size(), hora.rank()
    datas = [rank_data(r, 120, (r + 1, 3), "float32") for r in range(n)]
    out = hora.allgather(emu(datas[me]), name="gh.allgather")
    check(device_values(out, "float32"), np.concatenate(datas))


@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "float32"])
def test_joined_rank_adds_zeros(dtype: str) -> None:
    """The last rank joins: it adds zeros to the others' hierarchical allreduce (on the device
    its host communicator already uses)."""
    n, me = hora.size(), hora.rank()
    datas = [rank_data(r, 130, (1001,), dtype) for r in range(n)]
    if me != n - 1:
        t = emu(datas[me])
        hora.allreduce_(t, op=hora.Sum, name=f"gh.join.{dtype}")
        check(read(t, dtype), reference(hora.Sum, datas[:n - 1], dtype))
    # The others' allreduce could only run once rank n - 1 had joined, so one of them is last.
    assert hora.join() < n - 1
