"""Stream order and lifetime on the GPU path, through the emulation (run under horarun -np N).

The producer of each tensor writes its values late, on its own stream (a slow kernel). The engine
must order its stream after the tensor's ready event before any copy or collective; when a handle
completes, the device work is done (the result is in memory without any further sync); and the
input is released only after the engine's work on it finished.
"""
from __future__ import annotations

import gc

import hora
import numpy as np
import pytest
from emulated_tensor import EmuTensor, device_values

SLOW_MS = 300


@pytest.fixture(scope="module", autouse=True)
def engine():
    hora.init()
    yield
    hora.shutdown()


def test_collective_waits_for_the_producer_stream() -> None:
    n, me = hora.size(), hora.rank()
    values = np.arange(1000, dtype=np.float32) + me
    t = EmuTensor.from_numpy(values, device=hora.local_rank(), delay_ms=SLOW_MS)
    assert not t.peek().any()  # the producer has not written yet: memory is still zeros
    hora.allreduce_(t, op=hora.Sum, name="slow.producer")
    expected = n * np.arange(1000, dtype=np.float32) + sum(range(n))
    # peek(): no sync of any stream; the handle's completion alone must make the result final.
    np.testing.assert_array_equal(t.peek(), expected)


def test_fused_inputs_each_wait_for_their_producer() -> None:
    n, me = hora.size(), hora.rank()
    tensors = [EmuTensor.from_numpy(np.full(50 + k, me + k, np.int32), device=hora.local_rank(),
                                    delay_ms=SLOW_MS // (k + 1)) for k in range(3)]
    hora.grouped_allreduce_(tensors, op=hora.Sum, name="slow.group")
    for k, t in enumerate(tensors):
        np.testing.assert_array_equal(t.peek(), np.full(50 + k, sum(range(n)) + n * k, np.int32))


def test_allgather_input_waits_for_the_producer() -> None:
    n, me = hora.size(), hora.rank()
    t = EmuTensor.from_numpy(np.full((2, 3), me + 1, np.int64), device=hora.local_rank(),
                             delay_ms=SLOW_MS)
    out = hora.allgather(t, name="slow.allgather")
    expected = np.concatenate([np.full((2, 3), r + 1, np.int64) for r in range(n)])
    np.testing.assert_array_equal(device_values(out, np.int64), expected)


def test_input_is_released_only_after_the_device_work() -> None:
    n, me = hora.size(), hora.rank()
    t = EmuTensor.from_numpy(np.full(64, me, np.float64), device=hora.local_rank(),
                             delay_ms=SLOW_MS // 2)
    seen: list[np.ndarray] = []
    # Called when the engine lets go of the DLPack export: the reduction must be in memory then.
    t.on_release = lambda: seen.append(t.peek())
    handle = hora.allreduce_async_(t, op=hora.Sum, name="lifetime")
    hora.synchronize(handle)
    del handle
    gc.collect()
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], np.full(64, sum(range(n)), np.float64))
