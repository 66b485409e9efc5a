"""Every collective, dtype and fused combination through the GPU path (NCCL), against NumPy.

Runs under ``horarun -np N`` with HORA_NCCL_LIBRARY and HORA_CUDA_LIBRARY pointing at the CPU
emulation (tests/gpu_emulation): each rank drives "GPU <local rank>", tensors are EmuTensor objects
that speak DLPack as CUDA tensors do, and results are read back from emulated device memory.
"""
from __future__ import annotations

import itertools

import hora
import ml_dtypes
import numpy as np
import pytest
from emulated_tensor import device_values, emu, rank_data, read

SIZES = [0, 1, 17, 1001, 20000]  # 20000 float32 > the 64 KiB fusion threshold of the stage
DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


@pytest.fixture(scope="module", autouse=True)
def engine():
    hora.init()
    yield
    hora.shutdown()


def reference(op: int, arrays: list[np.ndarray], dtype: str) -> np.ndarray:
    wide = [a.astype(np.float64) if a.dtype.kind == "V" or a.dtype.kind == "f" else
            a.astype(np.int64) for a in arrays]
    if op in (hora.Sum, hora.Average):
        total = np.sum(wide, axis=0)
        if op == hora.Average:
            n = len(arrays)
            total = total / n if total.dtype.kind == "f" else np.fix(total / n)
    elif op == hora.Min:
        total = np.min(wide, axis=0)
    elif op == hora.Max:
        total = np.max(wide, axis=0)
    else:
        total = np.prod(wide, axis=0)
    out = total.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    return out


def check(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    if expected.dtype.kind in "fV":
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=1e-2, atol=1e-2)
    else:
        np.testing.assert_array_equal(actual, expected)


OPS = [hora.Sum, hora.Average, hora.Min, hora.Max, hora.Product]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_allreduce(dtype: str, op: int) -> None:
    n, me = hora.size(), hora.rank()
    for i, size in enumerate(SIZES):
        seed = 7 + i
        if op == hora.Product:
            shape = (size,)
            datas = [np.clip(rank_data(r, seed, shape, "int8"), -1, 2).astype(
                ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype) for r in range(n)]
        else:
            datas = [rank_data(r, seed, (size,), dtype) for r in range(n)]
        t = emu(datas[me], delay_ms=20 if size == 17 else 0)
        hora.allreduce_(t, op=op, name=f"ar.{dtype}.{op}.{size}")
        check(read(t, dtype), reference(op, datas, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_allreduce_fuses_on_device(dtype: str) -> None:
    n, me = hora.size(), hora.rank()
    shapes = [(3, 5), (0,), (1,), (20000,), (7,)]
    datas = [[rank_data(r, 40 + k, s, dtype) for k, s in enumerate(shapes)] for r in range(n)]
    tensors = [emu(d, delay_ms=5 * k) for k, d in enumerate(datas[me])]
    hora.grouped_allreduce_(tensors, op=hora.Average, name=f"gar.{dtype}")
    for k, t in enumerate(tensors):
        check(read(t, dtype), reference(hora.Average, [datas[r][k] for r in range(n)], dtype))


@pytest.mark.parametrize("dtype", DTYPES + ["int16", "uint16", "bool"])
def test_broadcast(dtype: str) -> None:
    n, me = hora.size(), hora.rank()
    for root, size in itertools.product(range(n), SIZES):
        data_dtype = "int8" if dtype == "bool" else dtype
        values = rank_data(me, 60 + size, (size,), data_dtype)
        if dtype == "bool":
            values = values > 0
        t = emu(values)
        hora.broadcast_(t, root_rank=root, name=f"bc.{dtype}.{root}.{size}")
        expected = rank_data(root, 60 + size, (size,), data_dtype)
        if dtype == "bool":
            expected = expected > 0
        actual = read(t, dtype)
        np.testing.assert_array_equal(actual.view(np.uint8) if dtype == "bool" else actual,
                                      expected.view(np.uint8) if dtype == "bool" else expected)


def out_values(out, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return device_values(out, np.uint16).view(ml_dtypes.bfloat16)
    return device_values(out, dtype)


@pytest.mark.parametrize("dtype", DTYPES + ["int16", "uint16"])
def test_allgather_uneven_rows(dtype: str) -> None:
    n, me = hora.size(), hora.rank()
    for rows_base in (0, 1, 3):
        rows = [rows_base + r for r in range(n)]  # unequal blocks: grouped broadcasts
        datas = [rank_data(r, 80 + rows_base, (rows[r], 3), dtype) for r in range(n)]
        out = hora.allgather(emu(datas[me]), name=f"ag.{dtype}.{rows_base}")
        check(out_values(out, dtype), np.concatenate(datas))
    equal = [rank_data(r, 90, (4, 2), dtype) for r in range(n)]  # equal: one ncclAllGather
    out = hora.allgather(emu(equal[me]), name=f"ag.{dtype}.equal")
    check(out_values(out, dtype), np.concatenate(equal))


@pytest.mark.parametrize("dtype", ["int32", "float16", "bfloat16", "float64"])
def test_grouped_allgather(dtype: str) -> None:
    n, me = hora.size(), hora.rank()
    shapes = [lambda r: (r + 1, 2), lambda r: (0, 4), lambda r: (5000 + r,)]
    datas = [[rank_data(r, 100 + k, s(r), dtype) for k, s in enumerate(shapes)] for r in range(n)]
    outs = hora.grouped_allgather([emu(d) for d in datas[me]], name=f"gag.{dtype}")
    for k, out in enumerate(outs):
        check(out_values(out, dtype), np.concatenate([datas[r][k] for r in range(n)]))


@pytest.mark.parametrize("dtype", DTYPES + ["int16", "bool"])
def test_alltoall(dtype: str) -> None:
    n, me = hora.size(), hora.rank()
    data_dtype = "int8" if dtype == "bool" else dtype
    # splits[i][j]: rows rank i sends to rank j, zeros included
    splits = [[(i + 2 * j) % 3 for j in range(n)] for i in range(n)]
    datas = [rank_data(i, 120, (sum(splits[i]), 2), data_dtype) for i in range(n)]
    if dtype == "bool":
        datas = [d > 0 for d in datas]
    out, received = hora.alltoall(emu(datas[me]), splits=splits[me], name=f"a2a.{dtype}")
    expected = []
    for i in range(n):
        start = sum(splits[i][:me])
        expected.append(datas[i][start:start + splits[i][me]])
    expected_values = np.concatenate(expected)
    actual = out_values(out, "uint8" if dtype == "bool" else dtype)
    if dtype == "bool":
        expected_values = expected_values.view(np.uint8)
    check(actual, expected_values)
    assert list(received) == [splits[i][me] for i in range(n)]


def reducescatter_reference(op: int, datas: list[np.ndarray], dtype: str, me: int) -> np.ndarray:
    n = len(datas)
    full = reference(op, datas, dtype)
    dim0 = datas[0].shape[0]
    rows = [dim0 // n + (1 if k < dim0 % n else 0) for k in range(n)]
    start = sum(rows[:me])
    return full[start:start + rows[me]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [hora.Sum, hora.Average])
def test_reducescatter(dtype: str, op: int) -> None:
    n, me = hora.size(), hora.rank()
    for dim0 in (0, 1, n, 2 * n + 1, 5003):  # equal blocks (one ncclReduceScatter) and not
        datas = [rank_data(r, 140 + dim0, (dim0, 3), dtype) for r in range(n)]
        out = hora.reducescatter(emu(datas[me]), op=op, name=f"rs.{dtype}.{op}.{dim0}")
        check(out_values(out, dtype), reducescatter_reference(op, datas, dtype, me))


@pytest.mark.parametrize("dtype", ["int32", "float16", "bfloat16", "float32"])
def test_grouped_reducescatter(dtype: str) -> None:
    n, me = hora.size(), hora.rank()
    shapes = [(2 * n + 1, 2), (n,), (4000,)]
    datas = [[rank_data(r, 160 + k, s, dtype) for k, s in enumerate(shapes)] for r in range(n)]
    outs = hora.grouped_reducescatter([emu(d) for d in datas[me]], op=hora.Sum,
                                      name=f"grs.{dtype}")
    for k, out in enumerate(outs):
        check(out_values(out, dtype),
              reducescatter_reference(hora.Sum, [datas[r][k] for r in range(n)], dtype, me))


def test_cpu_and_gpu_tensors_in_one_job() -> None:
    n, me = hora.size(), hora.rank()
    cpu = np.full(5, me, np.float32)
    gpu = emu(np.full(5, me, np.float32))
    handles = [hora.allreduce_async_(cpu, op=hora.Sum, name="mixed.cpu"),
               hora.allreduce_async_(gpu, op=hora.Sum, name="mixed.gpu")]
    for h in handles:
        hora.synchronize(h)
    expected = np.full(5, sum(range(n)), np.float32)
    np.testing.assert_array_equal(cpu, expected)
    np.testing.assert_array_equal(gpu.numpy(), expected)


def test_process_set_gets_its_own_communicator() -> None:
    n, me = hora.size(), hora.rank()
    if n < 3:
        pytest.skip("a proper subset needs 3 ranks or more")
    members = [0, n - 1]
    ps = hora.add_process_set(members) if hora.is_initialized() else None
    try:
        if me in members:
            t = emu(np.full(4, me + 1, np.int32))
            hora.allreduce_(t, op=hora.Sum, name="ps.x", process_set=ps)
            np.testing.assert_array_equal(t.numpy(), np.full(4, 1 + n, np.int32))
    finally:
        hora.remove_process_set(ps)


@pytest.mark.parametrize("dtype", ["int16", "uint16", "bool"])
def test_reduction_nccl_lacks_is_not_supported(dtype: str) -> None:
    values = np.zeros(3, dtype=dtype)
    with pytest.raises(hora.NotSupportedError,
                       match=f"cannot reduce {dtype} tensors: cast them to a type it reduces"):
        hora.allreduce_(emu(values), op=hora.Sum, name=f"bad.{dtype}")


def test_host_copying_calls_refuse_a_cuda_tensor() -> None:
    with pytest.raises(TypeError, match="in-place form"):
        hora.allreduce(emu(np.ones(4, np.float32)), op=hora.Sum, name="copying.allreduce")
    with pytest.raises(TypeError, match="in-place form"):
        hora.broadcast(emu(np.ones(4, np.float32)), root_rank=0, name="copying.broadcast")


def test_adasum_on_gpu_is_not_supported() -> None:
    with pytest.raises(hora.NotSupportedError, match="Adasum"):
        hora.allreduce_(emu(np.ones(4, np.float32)), op=hora.Adasum, name="adasum.gpu")


def test_adasum_on_gpu_is_refused_at_enqueue() -> None:
    """Refused in the caller's thread by the GPU backend's capabilities, naming the tensor, not
    later by the GPU executor."""
    with pytest.raises(hora.NotSupportedError,
                       match=r"tensor '(allreduce\.)?adasum\.enqueue' is on GPU \d+: Adasum is not "
                             "supported for GPU tensors; reduce a CPU copy"):
        hora.allreduce_(emu(np.ones(4, np.float32)), op=hora.Adasum, name="adasum.enqueue")


def test_scale_factors_on_gpu_are_not_supported() -> None:
    with pytest.raises(hora.NotSupportedError, match="prescale"):
        hora.allreduce_(emu(np.ones(4, np.float32)), op=hora.Sum, prescale_factor=2.0,
                        name="scaled.gpu")


def test_gpu_on_one_rank_and_cpu_on_another_is_a_mismatch() -> None:
    if hora.size() < 2:
        pytest.skip("needs two ranks")
    me = hora.rank()
    values = np.ones(3, np.float32)
    t = emu(values) if me == 0 else values
    with pytest.raises(hora.MismatchError, match="CPU/GPU device selection"):
        hora.allreduce_(t, op=hora.Sum, name="cpu.vs.gpu")
