"""hora.mxnet on GPU NDArrays: through NCCL, in device memory, against NumPy references.

Runs under ``horarun -np N`` in the MXNet environment with HORA_NCCL_LIBRARY and
HORA_CUDA_LIBRARY pointing at the CPU emulation (tests/run_all.sh, mxnet stage). A CPU build of
MXNet cannot make GPU arrays, so each rank's arrays are ``EmuNDArray`` stand-ins on
``mx.gpu(local rank)`` (tests/gpu/emulated_ndarray.py), exporting and importing device memory as
MXNet's GPU build does.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")

import hora.mxnet as hvd
import mxnet as mx
import numpy as np
import pytest
from emulated_ndarray import EmuNDArray, from_dlpack
from emulated_tensor import rank_data
from hora.mxnet import mpi_ops

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
SIZES = [0, 1, 17, 20000]  # 20000 float32 > the 64 KiB fusion threshold of the stage
SLOW_MS = 200


@pytest.fixture(scope="module", autouse=True)
def engine():
    hvd.init()
    assert hvd.nccl_built(), "run with the GPU emulation (tests/run_all.sh, mxnet stage)"
    yield
    hvd.shutdown()


@pytest.fixture(autouse=True)
def gpu_import(monkeypatch):
    cpu_import = mx.nd.from_dlpack
    monkeypatch.setattr(mx.nd, "from_dlpack", lambda capsule: from_dlpack(capsule, cpu_import))


def on_gpu(values: np.ndarray, delay_ms: int = 0) -> EmuNDArray:
    return EmuNDArray.make(values, hvd.local_rank(), delay_ms)


def every_rank(seed: int, shape: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    return [rank_data(r, seed, shape, dtype) for r in range(hvd.size())]


def check(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_array_equal(actual, expected)


def assert_on_this_gpu(out: object) -> None:
    assert isinstance(out, EmuNDArray), f"expected a GPU result, got {type(out).__name__}"
    assert out.context == mx.gpu(hvd.local_rank())


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_in_place_runs_in_device_memory(dtype: str) -> None:
    for i, size in enumerate(SIZES):
        datas = every_rank(10 + i, (size,), dtype)
        # A slow producer for one size: the export must wait for the array's pending write.
        t = on_gpu(datas[hvd.rank()], delay_ms=SLOW_MS if size == 17 else 0)
        assert hvd.allreduce_(t, op=hvd.Sum, name=f"mx.gpu.sum.{dtype}.{size}") is t
        check(t.values(), np.sum(datas, axis=0).astype(dtype))
        assert t.calls == ["to_dlpack_for_write"]  # no host copy


@pytest.mark.parametrize("dtype", ["int32", "float32", "float16"])
def test_average_min_max(dtype: str) -> None:
    datas = every_rank(3, (1001,), dtype)
    me = hvd.rank()
    for op, expected in [(hvd.Min, np.min(datas, axis=0)), (hvd.Max, np.max(datas, axis=0))]:
        t = on_gpu(datas[me])
        hvd.allreduce_(t, op=op, name=f"mx.gpu.{op}.{dtype}")
        check(t.values(), expected.astype(dtype))
    t = on_gpu(datas[me])
    hvd.allreduce_(t, op=hvd.Average, name=f"mx.gpu.avg.{dtype}")
    total = np.sum(np.asarray(datas, dtype=np.float64), axis=0) / hvd.size()
    check(t.values(), (total if dtype != "int32" else np.fix(total)).astype(dtype))


def test_out_of_place_allreduce_and_broadcast_copy_on_the_device() -> None:
    datas = every_rank(4, (5, 7), "float32")
    me = hvd.rank()
    t = on_gpu(datas[me])
    out = hvd.allreduce(t, op=hvd.Sum, name="mx.gpu.outofplace")
    assert_on_this_gpu(out)
    check(out.values(), np.sum(datas, axis=0))
    check(t.values(), datas[me])  # the input is left as it was
    assert t.calls == ["copy"]

    b = hvd.broadcast(t, root_rank=hvd.size() - 1, name="mx.gpu.bcast")
    assert_on_this_gpu(b)
    check(b.values(), datas[-1])
    hvd.broadcast_(t, root_rank=0, name="mx.gpu.bcast_")
    check(t.values(), datas[0])


def test_grouped_allreduce_fuses_device_arrays() -> None:
    me = hvd.rank()
    groups = [every_rank(20 + k, (30 + k,), "float32") for k in range(3)]
    tensors = [on_gpu(g[me], delay_ms=SLOW_MS // (k + 1)) for k, g in enumerate(groups)]
    hvd.grouped_allreduce_(tensors, op=hvd.Sum, name="mx.gpu.group")
    for t, g in zip(tensors, groups):
        check(t.values(), np.sum(g, axis=0))
        assert t.calls == ["to_dlpack_for_write"]


def test_allgather_returns_device_arrays() -> None:
    n, me = hvd.size(), hvd.rank()
    datas = [rank_data(r, 5, (r + 1, 3), "int64") for r in range(n)]
    t = on_gpu(datas[me], delay_ms=SLOW_MS)
    out = hvd.allgather(t, name="mx.gpu.allgather")
    assert_on_this_gpu(out)
    check(out.values(), np.concatenate(datas))
    assert t.calls == ["to_dlpack_for_read"]


def test_alltoall_and_reducescatter_return_device_arrays() -> None:
    n, me = hvd.size(), hvd.rank()
    splits = [(me + j) % 3 for j in range(n)]
    rows = rank_data(me, 6, (sum(splits), 2), "float32")
    out, received = hvd.alltoall(on_gpu(rows), splits=splits, name="mx.gpu.alltoall")
    assert_on_this_gpu(out)
    expected = []
    for r in range(n):
        their = [(r + j) % 3 for j in range(n)]
        start = sum(their[:me])
        expected.append(rank_data(r, 6, (sum(their), 2), "float32")[start:start + their[me]])
    check(out.values(), np.concatenate(expected))
    np.testing.assert_array_equal(received.asnumpy(), [(r + me) % 3 for r in range(n)])

    datas = every_rank(7, (2 * n + 1, 4), "float32")
    share = hvd.reducescatter(on_gpu(datas[me]), op=hvd.Sum, name="mx.gpu.reducescatter")
    assert_on_this_gpu(share)
    total = np.sum(datas, axis=0)
    bounds = np.cumsum([0] + [2 + (1 if r < 1 else 0) for r in range(n)])
    check(share.values(), total[bounds[me]:bounds[me + 1]])


def test_requests_nccl_cannot_run_take_the_host() -> None:
    t = on_gpu(np.ones(4, np.float32))
    assert mpi_ops._zero_copy(t, {"op": hvd.Sum})
    assert not mpi_ops._zero_copy(t, {"op": hvd.Sum, "prescale": 0.5})
    assert not mpi_ops._zero_copy(t, {"op": hvd.Sum, "postscale": 2.0})
    assert not mpi_ops._zero_copy(t, {"op": hvd.Adasum})
    assert not mpi_ops._zero_copy(on_gpu(np.ones(4, np.bool_)), {})
