"""hora.tensorflow on eager GPU tensors: through NCCL, in device memory, against NumPy references.

Runs under ``horarun -np N`` in the TensorFlow environment with HORA_NCCL_LIBRARY and
HORA_CUDA_LIBRARY pointing at the CPU emulation (tests/run_all.sh, tensorflow stage). A CPU build
of TensorFlow has no GPU, so ``FakeGpu`` plays TensorFlow's side: it places eager tensors "on GPU
<local rank>" (a CPU tensor of the same shape and dtype stands for each, its values in emulated
device memory written by a producer stream that may be slow), and stands in for the TensorFlow
calls the frontend makes on GPU tensors. Like TensorFlow's, its ``to_dlpack`` does no stream
handling: only ``sync_devices`` makes a slow producer's values complete.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import hora.tensorflow as hvd
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from emulated_tensor import EmuTensor, emu, rank_data, read, read_capsule
from hora.tensorflow import _device

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
SIZES = [0, 1, 17, 20000]  # 20000 float32 > the 64 KiB fusion threshold of the stage
SLOW_MS = 200


class FakeGpu:
    """TensorFlow's GPU for the frontend, played over the emulation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.memory: dict[int, tuple[tf.Tensor, EmuTensor, str]] = {}
        self.syncs = 0
        cpu_import = tf.experimental.dlpack.from_dlpack
        monkeypatch.setattr(_device, "ordinal", self.ordinal)
        monkeypatch.setattr(tf.test.experimental, "sync_devices", self.sync_devices)
        monkeypatch.setattr(tf.experimental.dlpack, "to_dlpack", self.to_dlpack)
        monkeypatch.setattr(tf.experimental.dlpack, "from_dlpack",
                            lambda capsule: self.from_dlpack(capsule, cpu_import))
        monkeypatch.setattr(tf.raw_ops, "DeepCopy", self.deep_copy)

    def place(self, values: np.ndarray, delay_ms: int = 0) -> tf.Tensor:
        """An eager tensor on this rank's GPU holding ``values`` once its producer finished."""
        dtype = "bfloat16" if values.dtype == ml_dtypes.bfloat16 else values.dtype.name
        carrier = tf.zeros(values.shape, dtype=tf.as_dtype(values.dtype))
        self.memory[id(carrier)] = (carrier, emu(values, delay_ms), dtype)
        return carrier

    def values(self, tensor: tf.Tensor) -> np.ndarray:
        """A GPU tensor's values once its own producer finished (no wait on Hora's streams)."""
        _, memory, dtype = self.memory[id(tensor)]
        return read(memory, dtype)

    def ordinal(self, tensor: object) -> int | None:
        return hvd.local_rank() if id(tensor) in self.memory else None

    def sync_devices(self) -> None:
        self.syncs += 1
        for _, memory, _ in list(self.memory.values()):
            memory.lib.cudaStreamSynchronize(memory.stream)

    def to_dlpack(self, tensor: tf.Tensor) -> object:
        return self.memory[id(tensor)][1].__dlpack__()  # no stream handling, as TensorFlow's

    def deep_copy(self, x: tf.Tensor) -> tf.Tensor:
        """A copy on the device, queued behind the producer of ``x`` on its stream."""
        _, source, dtype = self.memory[id(x)]
        copy = tf.zeros(x.shape, dtype=x.dtype)
        target = EmuTensor(source.shape, source.dtype, source.device, source.bf16)
        target.stream = source.stream
        if source.nbytes:
            source.lib.horaEmuDelayedCopy(target.ptr, source.ptr, source.nbytes, 0, source.stream)
        self.memory[id(copy)] = (copy, target, dtype)
        return copy

    def from_dlpack(self, capsule: object, cpu_import: object) -> tf.Tensor:
        imported = read_capsule(capsule)
        if imported is None:
            return cpu_import(capsule)  # type: ignore[operator]
        values, _ = imported
        return self.place(values)


@pytest.fixture(scope="module", autouse=True)
def engine():
    hvd.init()
    assert hvd.nccl_built(), "run with the GPU emulation (tests/run_all.sh, tensorflow stage)"
    yield
    hvd.shutdown()


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return FakeGpu(monkeypatch)


def every_rank(seed: int, shape: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    return [rank_data(r, seed, shape, dtype) for r in range(hvd.size())]


def check(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.dtype.kind in "fV":
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=1e-2, atol=1e-2)
    else:
        np.testing.assert_array_equal(actual, expected)


def total(datas: list[np.ndarray], dtype: str) -> np.ndarray:
    wide = np.sum([d.astype(np.float64) for d in datas], axis=0)
    return wide.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_runs_in_device_memory(gpu: FakeGpu, dtype: str) -> None:
    me = hvd.rank()
    for i, size in enumerate(SIZES):
        datas = every_rank(30 + i, (size,), dtype)
        # A slow producer for one size: the export must wait for the device first.
        t = gpu.place(datas[me], delay_ms=SLOW_MS if size == 17 else 0)
        out = hvd.allreduce(t, op=hvd.Sum, name=f"tf.gpu.sum.{dtype}.{size}")
        assert gpu.ordinal(out) == hvd.local_rank(), "the result is not a GPU tensor"
        assert out is not t
        check(gpu.values(out), total(datas, dtype))
        check(gpu.values(t), datas[me])  # the input is left as it was
    assert gpu.syncs > 0


def test_grouped_allreduce_and_average(gpu: FakeGpu) -> None:
    me, n = hvd.rank(), hvd.size()
    groups = [every_rank(40 + k, (25 + k, 2), "float32") for k in range(3)]
    tensors = [gpu.place(g[me], delay_ms=SLOW_MS // (k + 1)) for k, g in enumerate(groups)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Average, name="tf.gpu.group")
    for out, g in zip(outs, groups):
        check(gpu.values(out), total(g, "float64").astype(np.float32) / np.float32(n))


def test_broadcast_allgather_alltoall_reducescatter(gpu: FakeGpu) -> None:
    n, me = hvd.size(), hvd.rank()
    b = every_rank(50, (9,), "int32")
    out = hvd.broadcast(gpu.place(b[me]), root_rank=n - 1, name="tf.gpu.bcast")
    check(gpu.values(out), b[n - 1])

    rows = [rank_data(r, 51, (r + 1, 3), "float16") for r in range(n)]
    out = hvd.allgather(gpu.place(rows[me], delay_ms=SLOW_MS), name="tf.gpu.allgather")
    check(gpu.values(out), np.concatenate(rows))

    splits = [(me + j) % 3 for j in range(n)]
    data = rank_data(me, 52, (sum(splits), 2), "float32")
    out, received = hvd.alltoall(gpu.place(data), splits=splits, name="tf.gpu.alltoall")
    expected = []
    for r in range(n):
        theirs = [(r + j) % 3 for j in range(n)]
        start = sum(theirs[:me])
        expected.append(rank_data(r, 52, (sum(theirs), 2), "float32")[start:start + theirs[me]])
    check(gpu.values(out), np.concatenate(expected))
    np.testing.assert_array_equal(received.numpy(), [(r + me) % 3 for r in range(n)])

    datas = every_rank(53, (2 * n + 1, 4), "float32")
    share = hvd.reducescatter(gpu.place(datas[me]), op=hvd.Sum, name="tf.gpu.reducescatter")
    bounds = np.cumsum([0] + [3 if r == 0 else 2 for r in range(n)])
    check(gpu.values(share), total(datas, "float32")[bounds[me]:bounds[me + 1]])


def test_requests_nccl_cannot_run_take_the_host(gpu: FakeGpu) -> None:
    t = [gpu.place(np.ones(4, np.float32))]
    assert _device.takes(t, {"op": hvd.Sum})
    assert not _device.takes(t, {"op": hvd.Sum, "prescale": 0.5})
    assert not _device.takes(t, {"op": hvd.Sum, "postscale": 2.0})
    assert not _device.takes(t, {"op": hvd.Adasum})
    assert not _device.takes(t + [tf.ones(4)], {"op": hvd.Sum})  # one tensor on the host


def test_device_index_of_a_placed_tensor() -> None:
    # The real probe (not the stand-in): host tensors, arrays and symbolic tensors have none.
    assert _device.ordinal(tf.ones(3)) is None
    assert _device.ordinal(np.ones(3)) is None
