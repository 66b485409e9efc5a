"""Collectives of hora.torch on every dtype and size, checked against NumPy on every rank.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_ops.py`` (N = 2, 3, 4).
Each rank builds every rank's input from a seed, so the expected result is computed locally.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import hora
import hora.torch as hvd
import numpy as np
import pytest
import torch
from conftest import (
    DTYPES,
    FLOAT_DTYPES,
    SIZES,
    adasum_ref,
    assert_close,
    assert_same,
    check_next_op_works,
    is_power_of_two,
    kind_for_op,
    rank,
    reduce_ref,
    reducescatter_rows,
    resolve_count,
    size,
)
from torch_helpers import TORCH_DTYPES, all_arrays, float_input, to_numpy, to_torch

OPS = {
    "average": hvd.Average,
    "sum": hvd.Sum,
    "min": hvd.Min,
    "max": hvd.Max,
    "product": hvd.Product,
}
EXACT_SCALES = [(0.5, 1.0), (1.0, 2.0), (2.0, 0.25)]


def _check(actual: torch.Tensor, expected: np.ndarray, dtype: str, exact: bool = True) -> None:
    assert actual.dtype == TORCH_DTYPES[dtype]
    if exact:
        assert_same(to_numpy(actual), expected, dtype)
    else:
        assert_close(to_numpy(actual), expected, dtype)


def _shape_in_message(message: str, r: int, shape: list[int]) -> bool:
    return f"rank {r}: [{', '.join(str(d) for d in shape)}]" in message


# ------------------------------------------------------------------------------------- basics


def test_basics() -> None:
    """Topology getters agree with the hora package; the module layout matches Horovod's."""
    assert hvd.is_initialized()
    assert hvd.rank() == hora.rank() and hvd.size() == hora.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.mpi_ops.allreduce is hvd.allreduce
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


# ---------------------------------------------------------------------------------- allreduce


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_sum(dtype: str, count: int | str) -> None:
    """Out-of-place Sum for every dtype and size; the input stays unchanged."""
    n = resolve_count(count, dtype)
    xs = all_arrays(n, dtype, "t_ar_sum")
    x = to_torch(xs[rank()])
    out = hvd.allreduce(x, op=hvd.Sum, name=f"t_ar_sum.{dtype}.{n}")
    _check(out, reduce_ref(xs, "sum", dtype), dtype)
    assert_same(to_numpy(x), xs[rank()], dtype)
    assert n == 0 or out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize(
    ("dtype", "op"),
    [
        (d, o)
        for d in DTYPES
        for o in ("average", "min", "max", "product")
        if (d, o) != ("bool", "average")
    ],
)
def test_allreduce_ops(dtype: str, op: str) -> None:
    """Average (integers truncate), Min, Max and Product (bool has no average)."""
    xs = all_arrays(1001, dtype, "t_ar_ops", op, kind=kind_for_op(op))
    out = hvd.allreduce(to_torch(xs[rank()]), op=OPS[op], name=f"t_ar_ops.{op}.{dtype}")
    _check(out, reduce_ref(xs, op, dtype), dtype, exact=op != "average")


def test_allreduce_default_op_is_average() -> None:
    """Without op or average the result is the average."""
    xs = all_arrays([4, 5], "float32", "t_ar_default")
    out = hvd.allreduce(to_torch(xs[rank()]))
    _check(out, reduce_ref(xs, "average", "float32"), "float32", exact=False)


@pytest.mark.parametrize("count", [0, 17, "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_inplace(dtype: str, count: int | str) -> None:
    """allreduce_ and allreduce_async_ write into the given tensor and return it."""
    n = resolve_count(count, dtype)
    xs = all_arrays(n, dtype, "t_ar_inplace")
    expected = reduce_ref(xs, "sum", dtype)
    x = to_torch(xs[rank()])
    ptr = x.data_ptr()
    assert hvd.allreduce_(x, op=hvd.Sum, name=f"t_ar_inplace.{dtype}.{n}") is x
    assert x.data_ptr() == ptr
    _check(x, expected, dtype)
    y = to_torch(xs[rank()])
    handle = hvd.allreduce_async_(y, op=hvd.Sum, name=f"t_ar_inplace_async.{dtype}.{n}")
    assert hvd.synchronize(handle) is y
    _check(y, expected, dtype)


@pytest.mark.parametrize("scales", EXACT_SCALES, ids=str)
@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "bfloat16", "float32", "float64"])
def test_allreduce_prescale_postscale(dtype: str, op: str, scales: tuple[float, float]) -> None:
    """Prescale before the reduction, postscale after it."""
    pre, post = scales
    xs = all_arrays(65, dtype, "t_ar_scale", op)
    out = hvd.allreduce(
        to_torch(xs[rank()]),
        op=OPS[op],
        prescale_factor=pre,
        postscale_factor=post,
        name=f"t_ar_scale.{dtype}.{op}.{pre}.{post}",
    )
    _check(out, reduce_ref(xs, op, dtype, pre, post), dtype, exact=False)


def test_allreduce_deprecated_average() -> None:
    """average=True/False still works with a DeprecationWarning; with op it is a ValueError."""
    xs = all_arrays(9, "float64", "t_ar_dep")
    x = to_torch(xs[rank()])
    with pytest.warns(DeprecationWarning):
        avg = hvd.allreduce(x, average=True, name="t_ar_dep.avg")
    with pytest.warns(DeprecationWarning):
        total = hvd.allreduce(x, average=False, name="t_ar_dep.sum")
    _check(avg, reduce_ref(xs, "average", "float64"), "float64", exact=False)
    _check(total, reduce_ref(xs, "sum", "float64"), "float64")
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce_async_(x, average=False, op=hvd.Average)


@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 1), (2, 0, 3)], ids=str)
def test_allreduce_multidim_and_noncontiguous(shape: tuple[int, ...]) -> None:
    """N-d tensors keep their shape; a non-contiguous input works out of place."""
    xs = all_arrays(list(shape), "float32", "t_ar_nd")
    out = hvd.allreduce(to_torch(xs[rank()]), op=hvd.Sum, name=f"t_ar_nd.{shape}")
    assert tuple(out.shape) == shape
    _check(out, reduce_ref(xs, "sum", "float32"), "float32")
    transposed = to_torch(xs[rank()]).transpose(0, -1)
    out_t = hvd.allreduce(transposed, op=hvd.Sum, name=f"t_ar_nd_t.{shape}")
    assert out_t.shape == transposed.shape and out_t.is_contiguous()
    _check(out_t, reduce_ref([x.swapaxes(0, -1) for x in xs], "sum", "float32"), "float32")


def test_inplace_ops_refuse_noncontiguous() -> None:
    """In-place operations need contiguous memory: ValueError before anything is sent."""
    t = torch.zeros(4, 6).t()
    with pytest.raises(ValueError, match="not contiguous"):
        hvd.allreduce_(t)
    with pytest.raises(ValueError, match="not contiguous"):
        hvd.allreduce_async_(t)
    with pytest.raises(ValueError, match="not contiguous"):
        hvd.broadcast_(t, 0)
    with pytest.raises(ValueError, match="not contiguous"):
        hvd.grouped_allreduce_([torch.zeros(3), t])
    check_next_op_works("torch_noncontiguous")


@pytest.mark.parametrize("dtype", [torch.complex64, torch.uint32, torch.float8_e4m3fn], ids=str)
def test_unsupported_dtype(dtype: torch.dtype) -> None:
    """Dtypes the engine lacks raise ValueError naming the type."""
    t = torch.zeros(3, dtype=dtype)
    with pytest.raises(ValueError, match="is not supported"):
        hvd.allreduce(t)
    with pytest.raises(ValueError, match="is not supported"):
        hvd.allgather_async(t)


def test_allreduce_async_many_then_synchronize() -> None:
    """Many async allreduces in flight at once (they may fuse), then synchronized in order."""
    cases = [(d, c) for d in ["int32", "float32", "float64", "bfloat16"] for c in (1, 33, 257)]
    arrays = {case: all_arrays(case[1], case[0], "t_ar_many") for case in cases}
    handles = {
        case: hvd.allreduce_async(
            to_torch(xs[rank()]), op=hvd.Sum, name=f"t_ar_many.{case[0]}.{case[1]}"
        )
        for case, xs in arrays.items()
    }
    assert all(isinstance(h, int) for h in handles.values())
    assert all(isinstance(hvd.poll(h), bool) for h in handles.values())
    for case, handle in handles.items():
        _check(hvd.synchronize(handle), reduce_ref(arrays[case], "sum", case[0]), case[0])


def test_inplace_async_synchronize_returns_the_tensor_itself() -> None:
    """As in Horovod, ``synchronize`` of an in-place call returns the caller's tensor object:
    a plain tensor, and a Parameter too (the engine works on a detached view of it); an
    out-of-place call returns a new tensor and leaves its input as it was."""
    size = hora.size()
    plain = torch.ones(3)
    param = torch.nn.Parameter(torch.ones(3))
    out_plain = hvd.synchronize(hvd.allreduce_async_(plain, op=hvd.Sum, name="t_ip_plain"))
    out_param = hvd.synchronize(hvd.allreduce_async_(param, op=hvd.Sum, name="t_ip_param"))
    assert out_plain is plain
    assert out_param is param
    assert torch.equal(param.detach(), torch.full((3,), float(size)))
    assert param.requires_grad
    src = torch.ones(3)
    out = hvd.synchronize(hvd.allreduce_async(src, op=hvd.Sum, name="t_oop_async"))
    assert out is not src and torch.equal(src, torch.ones(3))
    assert torch.equal(out, torch.full((3,), float(size)))


def test_unknown_handle() -> None:
    """synchronize() of an unknown handle returns None; poll() raises ValueError."""
    assert hvd.synchronize(10**9) is None
    with pytest.raises(ValueError):
        hvd.poll(10**9)
    handle = hvd.allreduce_async(torch.ones(2), name="t_unknown")
    hvd.synchronize(handle)
    assert hvd.synchronize(handle) is None


def test_allreduce_unnamed_calls_match_by_order() -> None:
    """Unnamed operations get the same automatic names on every rank."""
    for i in range(5):
        xs = all_arrays(7, "int64", "t_ar_noname", i)
        out = hvd.allreduce(to_torch(xs[rank()]), op=hvd.Sum)
        _check(out, reduce_ref(xs, "sum", "int64"), "int64")


@pytest.mark.parametrize("scales", [(1.0, 1.0), (0.5, 4.0)], ids=str)
@pytest.mark.parametrize("op", ["sum", "average"])
def test_allreduce_grad(op: str, scales: tuple[float, float]) -> None:
    """The gradient of allreduce is the allreduce of the output gradients (same op, scales)."""
    pre, post = scales
    x = float_input(rank(), [5, 3], "t_ar_grad_x").requires_grad_()
    ws = [to_numpy(float_input(r, [5, 3], "t_ar_grad_w")) for r in range(size())]
    y = hvd.allreduce(
        x, op=OPS[op], prescale_factor=pre, postscale_factor=post, name=f"t_ar_grad.{op}.{pre}"
    )
    (y * to_torch(ws[rank()])).sum().backward()
    xs = [to_numpy(float_input(r, [5, 3], "t_ar_grad_x")) for r in range(size())]
    assert_close(to_numpy(y), reduce_ref(xs, op, "float64", pre, post), "float64")
    assert_close(to_numpy(x.grad), reduce_ref(ws, op, "float64", pre, post), "float64")


def test_allreduce_compression() -> None:
    """fp16 and bf16 compression send a cast copy; the result has the input's dtype."""
    xs = all_arrays(300, "float32", "t_ar_comp")
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16, hvd.Compression.none):
        out = hvd.allreduce(to_torch(xs[rank()]), op=hvd.Sum, compression=compression)
        _check(out, reduce_ref(xs, "sum", "float32"), "float32")
    ints = to_torch(all_arrays(5, "int32", "t_ar_comp_int")[rank()])
    tensor, ctx = hvd.Compression.fp16.compress(ints)
    assert tensor.dtype == torch.int32
    assert hvd.Compression.fp16.decompress(tensor, ctx).dtype == torch.int32


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_allreduce_adasum(dtype: str) -> None:
    """Adasum on a power-of-two number of ranks; an error on every rank otherwise."""
    xs = all_arrays(40, dtype, "t_adasum", kind="normal")
    x = to_torch(xs[rank()])
    if is_power_of_two(size()):
        out = hvd.allreduce(x, op=hvd.Adasum, name=f"t_adasum.{dtype}")
        assert_close(to_numpy(out), adasum_ref(xs).astype(dtype), dtype, rtol=1e-5, atol=1e-5)
    else:
        with pytest.raises((ValueError, RuntimeError), match="power of 2"):
            hvd.allreduce(x, op=hvd.Adasum, name=f"t_adasum.{dtype}")
        check_next_op_works(f"torch_adasum.{dtype}")


def test_allreduce_process_set() -> None:
    """Allreduce inside a dynamic process set of the even ranks; others may not use it."""
    evens = list(range(0, size(), 2))
    ps = hvd.add_process_set(evens)
    try:
        assert ps.ranks == evens
        xs = [to_numpy(float_input(r, [6], "t_ps")) for r in evens]
        if rank() in evens:
            out = hvd.allreduce(
                to_torch(xs[evens.index(rank())]), op=hvd.Sum, name="t_ps", process_set=ps
            )
            assert_close(to_numpy(out), reduce_ref(xs, "sum", "float64"), "float64")
        else:
            with pytest.raises(ValueError, match="not a member"):
                hvd.allreduce(torch.zeros(6, dtype=torch.float64), name="t_ps", process_set=ps)
    finally:
        hvd.remove_process_set(ps)


def test_unnamed_ops_in_sets_keep_global_names_in_step() -> None:
    """Ranks of two process sets issue different numbers of unnamed operations in their own set
    (with gradients); unnamed operations on the global set still match afterwards."""
    evens = list(range(0, size(), 2))
    odds = list(range(1, size(), 2))
    even_set, odd_set = hvd.add_process_set(evens), hvd.add_process_set(odds)
    try:
        mine, members = (even_set, evens) if rank() % 2 == 0 else (odd_set, odds)
        for root in members:
            x = torch.full([3], float(rank()), requires_grad=True)
            hvd.broadcast(x, root, process_set=mine).sum().backward()
            assert x.grad is not None
            assert torch.equal(x.grad, torch.full([3], 1.0 if rank() == root else 0.0))
        out = hvd.broadcast(torch.full([2], float(rank())), size() - 1)
        assert torch.equal(out, torch.full([2], float(size() - 1)))
        total = hvd.allreduce(torch.ones(2), op=hvd.Sum)
        assert torch.equal(total, torch.full([2], float(size())))
    finally:
        hvd.remove_process_set(odd_set)
        hvd.remove_process_set(even_set)


def test_allreduce_shape_mismatch_error() -> None:
    """Different shapes under one name fail on every rank, naming each rank's shape."""
    shapes = [[17 + r] for r in range(size())]
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(torch.zeros(shapes[rank()]), name="t_err_shape")
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "Mismatched ALLREDUCE tensor shapes" in message
    assert all(_shape_in_message(message, r, s) for r, s in enumerate(shapes)), message
    check_next_op_works("torch_err_shape")


def test_allreduce_dtype_mismatch_error() -> None:
    """Different dtypes under one name fail on every rank, naming both types."""
    dtype = torch.float32 if rank() == 0 else torch.int32
    with pytest.raises(hvd.HoraError) as info:
        hvd.allreduce(torch.zeros(5, dtype=dtype), name="t_err_dtype")
    message = str(info.value)
    assert "Mismatched data types" in message and "float32" in message and "int32" in message
    check_next_op_works("torch_err_dtype")


def test_allreduce_op_mismatch_error() -> None:
    """Different reduce ops under one name fail on every rank."""
    op = hvd.Sum if rank() == 0 else hvd.Max
    with pytest.raises(RuntimeError, match="Mismatched reduction operations"):
        hvd.allreduce(torch.zeros(5), op=op, name="t_err_op")
    check_next_op_works("torch_err_op")


def test_duplicate_name_error() -> None:
    """A second in-flight tensor with the same name is a ValueError; the first still works.

    Rank 0 and the other ranks use different names first, so neither operation can finish
    before the duplicate is tried; after a barrier each side submits the other name.
    """
    x = torch.ones(3)
    mine, other = ("t_dup_b", "t_dup_a") if rank() == 0 else ("t_dup_a", "t_dup_b")
    first = hvd.allreduce_async(x, op=hvd.Sum, name=mine)
    with pytest.raises(ValueError):
        hvd.allreduce_async(x, op=hvd.Sum, name=mine)
    hvd.barrier()
    second = hvd.allreduce_async(x, op=hvd.Sum, name=other)
    assert float(hvd.synchronize(first).sum()) == 3 * size()
    assert float(hvd.synchronize(second).sum()) == 3 * size()


# ------------------------------------------------------------------------- grouped allreduce


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_allreduce(dtype: str) -> None:
    """One group of tensors of several sizes: out of place, in place and async."""
    counts = [0, 1, 17, 1001]
    arrays = [all_arrays(c, dtype, "t_gar", i) for i, c in enumerate(counts)]
    mine = [to_torch(xs[rank()]) for xs in arrays]
    expected = [reduce_ref(xs, "sum", dtype) for xs in arrays]
    outs = hvd.grouped_allreduce(mine, op=hvd.Sum, name=f"t_gar.{dtype}")
    for out, exp in zip(outs, expected):
        _check(out, exp, dtype)
    handle = hvd.grouped_allreduce_async(mine, op=hvd.Sum)
    for out, exp in zip(hvd.synchronize(handle), expected):
        _check(out, exp, dtype)
    for t, xs in zip(mine, arrays):
        assert_same(to_numpy(t), xs[rank()], dtype)
    returned = hvd.grouped_allreduce_(mine, op=hvd.Sum, name=f"t_gar_inplace.{dtype}")
    assert all(a is b for a, b in zip(returned, mine))
    for t, exp in zip(mine, expected):
        _check(t, exp, dtype)


def test_grouped_allreduce_average_and_grad() -> None:
    """Grouped Average; its gradients are the grouped allreduce of the output gradients."""
    shapes = [[3], [2, 2]]
    xs = [float_input(rank(), s, "t_gar_grad_x", i).requires_grad_() for i, s in enumerate(shapes)]
    ws = [
        [to_numpy(float_input(r, s, "t_gar_grad_w", i)) for r in range(size())]
        for i, s in enumerate(shapes)
    ]
    outs = hvd.grouped_allreduce(xs, op=hvd.Average)
    loss = sum((o * to_torch(w[rank()])).sum() for o, w in zip(outs, ws))
    loss.backward()
    for x, w in zip(xs, ws):
        assert_close(to_numpy(x.grad), reduce_ref(w, "average", "float64"), "float64")
    assert hvd.grouped_allreduce([]) == []


# ---------------------------------------------------------------------------------- allgather


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather(dtype: str, count: int | str) -> None:
    """Rank r contributes count + r rows (dim0 differs); the result concatenates them."""
    n = resolve_count(count, dtype)
    xs = [all_arrays(n + r, dtype, "t_ag", n)[r] for r in range(size())]
    out = hvd.allgather(to_torch(xs[rank()]), name=f"t_ag.{dtype}.{n}")
    _check(out, np.concatenate(xs), dtype)


@pytest.mark.parametrize("dtype", ["uint8", "bool", "bfloat16", "float64"])
def test_allgather_multidim(dtype: str) -> None:
    """Trailing dimensions are kept; dim0 may differ and may be zero."""
    xs = [all_arrays([r % 3, 2, 3], dtype, "t_ag_nd", r)[r] for r in range(size())]
    out = hvd.allgather(to_torch(xs[rank()]), name=f"t_ag_nd.{dtype}")
    assert tuple(out.shape) == (sum(r % 3 for r in range(size())), 2, 3)
    _check(out, np.concatenate(xs), dtype)


def test_allgather_async_and_grouped() -> None:
    """Several async allgathers in flight, then a grouped allgather (sync and async)."""
    dtypes = ["int8", "int64", "float16", "float32"]
    arrays = {d: [all_arrays(r + 2, d, "t_ag_async")[r] for r in range(size())] for d in dtypes}
    handles = {
        d: hvd.allgather_async(to_torch(xs[rank()]), name=f"t_ag_async.{d}")
        for d, xs in arrays.items()
    }
    for d, handle in handles.items():
        _check(hvd.synchronize(handle), np.concatenate(arrays[d]), d)
    mine = [to_torch(arrays[d][rank()]) for d in dtypes]
    for outs in (
        hvd.grouped_allgather(mine, name="t_gag"),
        hvd.synchronize(hvd.grouped_allgather_async(mine)),
    ):
        for out, d in zip(outs, dtypes):
            _check(out, np.concatenate(arrays[d]), d)


def test_allgather_grad() -> None:
    """Gradient: average of the output gradients over ranks, then this rank's rows."""
    rows = [r + 1 for r in range(size())]
    x = float_input(rank(), [rows[rank()], 2], "t_ag_grad_x").requires_grad_()
    total = sum(rows)
    ws = [to_numpy(float_input(r, [total, 2], "t_ag_grad_w")) for r in range(size())]
    y = hvd.allgather(x, name="t_ag_grad")
    (y * to_torch(ws[rank()])).sum().backward()
    start = sum(rows[: rank()])
    expected = reduce_ref(ws, "average", "float64")[start : start + rows[rank()]]
    assert_close(to_numpy(x.grad), expected, "float64")


def test_grouped_allgather_grad() -> None:
    """Each tensor of a grouped allgather gets the allgather gradient."""
    x1 = float_input(rank(), [rank() + 1], "t_gag_grad_a").requires_grad_()
    x2 = float_input(rank(), [2, 3], "t_gag_grad_b").requires_grad_()
    y1, y2 = hvd.grouped_allgather([x1, x2])
    (y1.sum() * 2 + y2.sum() * 3).backward()
    assert torch.allclose(x1.grad, torch.full_like(x1, 2.0))
    assert torch.allclose(x2.grad, torch.full_like(x2, 3.0))


def test_allgather_errors() -> None:
    """Trailing-dimension and dtype mismatches fail everywhere; scalars are refused."""
    shapes = [[2, 3 + (r % 2)] for r in range(size())]
    with pytest.raises(hvd.HoraError) as info:
        hvd.allgather(torch.zeros(shapes[rank()]), name="t_ag_err_shape")
    message = str(info.value)
    assert "all dimensions but the first must match" in message
    assert all(_shape_in_message(message, r, s) for r, s in enumerate(shapes)), message
    dtype = torch.float32 if rank() == 0 else torch.float64
    with pytest.raises(RuntimeError, match="Mismatched data types"):
        hvd.allgather(torch.zeros(2, dtype=dtype), name="t_ag_err_dtype")
    with pytest.raises(ValueError):
        hvd.allgather(torch.tensor(1.0))
    check_next_op_works("torch_ag_err")


# ---------------------------------------------------------------------------------- broadcast


@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("count", [0, 17, "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype: str, count: int | str, root: str) -> None:
    """Out of place: every rank gets the root's values; the input stays unchanged."""
    root_rank = 0 if root == "first" else size() - 1
    n = resolve_count(count, dtype)
    xs = all_arrays(n, dtype, "t_bc", kind="any")
    x = to_torch(xs[rank()])
    out = hvd.broadcast(x, root_rank, name=f"t_bc.{dtype}.{n}.{root}")
    _check(out, xs[root_rank], dtype)
    assert_same(to_numpy(x), xs[rank()], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_inplace(dtype: str) -> None:
    """broadcast_ and broadcast_async_ overwrite the given tensor and return it."""
    root_rank = size() - 1
    xs = all_arrays([3, 5], dtype, "t_bc_inplace", kind="any")
    x = to_torch(xs[rank()])
    assert hvd.broadcast_(x, root_rank, name=f"t_bc_inplace.{dtype}") is x
    _check(x, xs[root_rank], dtype)
    y = to_torch(xs[rank()])
    assert hvd.synchronize(hvd.broadcast_async_(y, 0, name=f"t_bc_inplace_a.{dtype}")) is y
    _check(y, xs[0], dtype)
    src = to_torch(xs[rank()])
    z = hvd.synchronize(hvd.broadcast_async(src, 0))
    _check(z, xs[0], dtype)
    assert z is not src
    assert_same(to_numpy(src), xs[rank()], dtype)  # out of place: the input is left as it was


def test_broadcast_grad() -> None:
    """Gradient: the averaged output gradient on the root, zero on the other ranks."""
    root_rank = size() - 1
    x = float_input(rank(), [4], "t_bc_grad_x").requires_grad_()
    ws = [to_numpy(float_input(r, [4], "t_bc_grad_w")) for r in range(size())]
    y = hvd.broadcast(x, root_rank, name="t_bc_grad")
    (y * to_torch(ws[rank()])).sum().backward()
    expected = reduce_ref(ws, "average", "float64")
    if rank() != root_rank:
        expected = np.zeros_like(expected)
    assert_close(to_numpy(x.grad), expected, "float64")


def test_broadcast_errors() -> None:
    """Shape, dtype and root mismatches fail everywhere; a root outside the set is refused."""
    shapes = [[3, 1 + r] for r in range(size())]
    with pytest.raises(hvd.HoraError) as info:
        hvd.broadcast(torch.zeros(shapes[rank()]), 0, name="t_bc_err_shape")
    message = str(info.value)
    assert "Mismatched BROADCAST tensor shapes" in message
    assert all(_shape_in_message(message, r, s) for r, s in enumerate(shapes)), message
    dtype = torch.int64 if rank() == 0 else torch.float64
    with pytest.raises(RuntimeError, match="Mismatched data types"):
        hvd.broadcast(torch.zeros(3, dtype=dtype), 0, name="t_bc_err_dtype")
    with pytest.raises(RuntimeError, match="Mismatched BROADCAST root ranks"):
        hvd.broadcast(torch.zeros(3), rank(), name="t_bc_err_root")
    with pytest.raises(ValueError, match="invalid root rank"):
        hvd.broadcast(torch.zeros(3), size(), name="t_bc_err_bad_root")
    check_next_op_works("torch_bc_err")


# ----------------------------------------------------------------------------------- alltoall


@pytest.mark.parametrize("rows", [0, 1, 3, "big"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_equal_split(dtype: str, rows: int | str) -> None:
    """Without splits every rank sends dim0 / size rows to each rank."""
    per = resolve_count(rows, dtype) // 8 if rows == "big" else int(rows)
    xs = all_arrays([per * size(), 2], dtype, "t_a2a_eq", kind="any")
    out = hvd.alltoall(to_torch(xs[rank()]), name=f"t_a2a_eq.{dtype}.{per}")
    assert isinstance(out, torch.Tensor)
    me = rank()
    expected = np.concatenate([xs[j][me * per : (me + 1) * per] for j in range(size())])
    _check(out, expected, dtype)


def _splits(r: int, slack: int) -> tuple[list[int], int]:
    counts = [(r + 2 * j) % 3 + (1 if j == r else 0) for j in range(size())]
    return counts, sum(counts) + slack


@pytest.mark.parametrize("form", ["tensor", "list"])
@pytest.mark.parametrize("slack", [0, 2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_splits(dtype: str, slack: int, form: str) -> None:
    """With splits: rank r sends splits[j] rows to j and learns how many rows it received."""
    plan = [_splits(r, slack) for r in range(size())]
    xs = [all_arrays([plan[r][1], 3], dtype, "t_a2a_sp", r, kind="any")[r] for r in range(size())]
    counts = plan[rank()][0]
    splits = torch.tensor(counts, dtype=torch.int32) if form == "tensor" else counts
    out, received = hvd.alltoall(
        to_torch(xs[rank()]), splits=splits, name=f"t_a2a_sp.{dtype}.{slack}.{form}"
    )
    me = rank()
    expect_received = [plan[j][0][me] for j in range(size())]
    assert received.dtype == torch.int32 and received.tolist() == expect_received
    pieces = []
    for j in range(size()):
        start = sum(plan[j][0][:me])
        pieces.append(xs[j][start : start + plan[j][0][me]])
    _check(out, np.concatenate(pieces), dtype)


def test_alltoall_async() -> None:
    """alltoall_async: synchronize returns (output, received_splits)."""
    xs = all_arrays([2 * size()], "int32", "t_a2a_async")
    out, received = hvd.synchronize(hvd.alltoall_async(to_torch(xs[rank()])))
    assert received.tolist() == [2] * size()
    me = rank()
    _check(out, np.concatenate([xs[j][2 * me : 2 * me + 2] for j in range(size())]), "int32")


def test_alltoall_grad() -> None:
    """Gradient: the output gradient sent back with the received splits (unsent rows: 0)."""
    plan = [_splits(r, 1) for r in range(size())]
    counts, rows = plan[rank()]
    x = float_input(rank(), [rows, 2], "t_a2a_grad_x").requires_grad_()
    y, received = hvd.alltoall(x, splits=counts, name="t_a2a_grad")
    ws = [
        to_numpy(float_input(j, [sum(plan[k][0][j] for k in range(size())), 2], "t_a2a_grad_w"))
        for j in range(size())
    ]
    (y * to_torch(ws[rank()])).sum().backward()
    me = rank()
    expected = np.zeros((rows, 2))
    offset = 0
    for j in range(size()):
        n = counts[j]
        start = sum(plan[k][0][j] for k in range(me))
        expected[offset : offset + n] = ws[j][start : start + n]
        offset += n
    assert_close(to_numpy(x.grad), expected, "float64")
    assert not received.requires_grad


def test_alltoall_errors() -> None:
    """Bad splits are refused where the call is made; shape mismatches fail everywhere."""
    t = torch.zeros(2 * size(), 3)
    with pytest.raises(ValueError, match="Number of entries in splits"):
        hvd.alltoall(t, splits=[1] * (size() + 1))
    with pytest.raises(ValueError):
        hvd.alltoall(t, splits=torch.ones(size(), dtype=torch.float32))
    with pytest.raises(ValueError):
        hvd.alltoall(t, splits=[3 * size()] * size())
    with pytest.raises(ValueError):
        hvd.alltoall(torch.zeros(2 * size() + 1))
    shapes = [[size(), 2 + r % 2] for r in range(size())]
    with pytest.raises(hvd.HoraError) as info:
        hvd.alltoall(torch.zeros(shapes[rank()]), name="t_a2a_err_shape")
    assert all(_shape_in_message(str(info.value), r, s) for r, s in enumerate(shapes))
    check_next_op_works("torch_a2a_err")


# ------------------------------------------------------------------------------ reducescatter


def _scatter_expected(full: np.ndarray) -> np.ndarray:
    rows = reducescatter_rows(full.shape[0], size())
    start = sum(rows[: rank()])
    return full[start : start + rows[rank()]]


@pytest.mark.parametrize("dim0", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reducescatter_sum(dtype: str, dim0: int | str) -> None:
    """Sum, then rank i keeps its block; the first dim0 % size ranks get one row more."""
    n = resolve_count(dim0, dtype)
    xs = all_arrays(n, dtype, "t_rs")
    out = hvd.reducescatter(to_torch(xs[rank()]), op=hvd.Sum, name=f"t_rs.{dtype}.{n}")
    _check(out, _scatter_expected(reduce_ref(xs, "sum", dtype)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reducescatter_average(dtype: str) -> None:
    """Average is the default op of reducescatter; integers truncate."""
    xs = all_arrays([11, 2], dtype, "t_rs_avg")
    out = hvd.reducescatter(to_torch(xs[rank()]), name=f"t_rs_avg.{dtype}")
    _check(out, _scatter_expected(reduce_ref(xs, "average", dtype)), dtype, exact=False)


@pytest.mark.parametrize("scales", EXACT_SCALES, ids=str)
@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("dtype", ["int64", "float16", "float32"])
def test_reducescatter_prescale_postscale(dtype: str, op: str, scales: tuple[float, float]) -> None:
    """Scale factors as for allreduce."""
    pre, post = scales
    xs = all_arrays([9, 3], dtype, "t_rs_scale", op)
    out = hvd.reducescatter(
        to_torch(xs[rank()]), op=OPS[op], prescale_factor=pre, postscale_factor=post
    )
    _check(out, _scatter_expected(reduce_ref(xs, op, dtype, pre, post)), dtype, exact=False)


def test_reducescatter_async_and_grouped() -> None:
    """reducescatter_async, grouped_reducescatter and grouped_reducescatter_async."""
    dtypes = ["int32", "float64", "bfloat16"]
    arrays = {d: all_arrays([7, 2], d, "t_grs") for d in dtypes}
    expected = {d: _scatter_expected(reduce_ref(xs, "sum", d)) for d, xs in arrays.items()}
    handles = {
        d: hvd.reducescatter_async(to_torch(xs[rank()]), op=hvd.Sum) for d, xs in arrays.items()
    }
    for d, handle in handles.items():
        _check(hvd.synchronize(handle), expected[d], d)
    mine = [to_torch(arrays[d][rank()]) for d in dtypes]
    for outs in (
        hvd.grouped_reducescatter(mine, op=hvd.Sum, name="t_grs"),
        hvd.synchronize(hvd.grouped_reducescatter_async(mine, op=hvd.Sum)),
    ):
        for out, d in zip(outs, dtypes):
            _check(out, expected[d], d)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_scale_factors_match_horovod_arithmetic(dtype: torch.dtype) -> None:
    """prescale/postscale as Horovod computes them on the CPU: in float64 truncated back for
    integers, in float32 for float16 (and bfloat16), in the tensor's own dtype otherwise; with
    equal inputs at up to three ranks the results are bit-identical."""
    n = size()
    gen = torch.Generator().manual_seed(1234)
    low = 0 if dtype == torch.uint8 else -30
    x = torch.randint(low, 30, (17, 17), generator=gen).to(dtype)
    math = torch.float64 if not dtype.is_floating_point else (
        torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype)
    for i, factor in enumerate((0.9766997666981422, 0.3)):
        pre = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor, name=f"t_bitscale.pre.{i}")
        post = hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor, name=f"t_bitscale.post.{i}")
        f = torch.tensor(factor, dtype=torch.float64).to(math)
        want_pre = ((f * x.to(math)).to(dtype).double() * n).to(dtype)
        want_post = (f * (x.double() * n).to(dtype).to(math)).to(dtype)
        if n <= 3:
            assert torch.equal(pre, want_pre) and torch.equal(post, want_post)
        else:
            assert torch.allclose(pre.double(), want_pre.double(), rtol=1e-2, atol=1e-2)
            assert torch.allclose(post.double(), want_post.double(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op", ["sum", "average"])
def test_reducescatter_grad(op: str) -> None:
    """Gradient as Horovod computes it: the allgathered output gradients, times the set size for
    Sum and unscaled for Average."""
    dim0 = 2 * size() + 1
    x = float_input(rank(), [dim0, 2], "t_rs_grad_x").requires_grad_()
    y = hvd.reducescatter(x, op=OPS[op], name=f"t_rs_grad.{op}")
    rows = reducescatter_rows(dim0, size())
    ws = [to_numpy(float_input(r, [rows[r], 2], "t_rs_grad_w")) for r in range(size())]
    (y * to_torch(ws[rank()])).sum().backward()
    expected = np.concatenate(ws)
    if op == "sum":
        expected = expected * size()
    assert_close(to_numpy(x.grad), expected, "float64")


def test_reducescatter_grad_scaled() -> None:
    """Horovod's order: the gradient times the set size (Sum), the prescale, the postscale."""
    x = torch.ones([2 * size(), 3], dtype=torch.float32, requires_grad=True)
    y = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.1,
                          name="t_rs_grad_scaled")
    y.backward(torch.full_like(y, 0.7))
    g = torch.full([2 * size(), 3], 0.7, dtype=torch.float32)
    expected = ((g * size()) * 3.0) * 0.1
    assert torch.equal(x.grad, expected)


def test_grouped_reducescatter_grad() -> None:
    """Each tensor of a grouped reducescatter gets the reducescatter gradient (times the set size
    for Sum, as in Horovod)."""
    a = float_input(rank(), [size(), 2], "t_grs_grad_a").requires_grad_()
    b = float_input(rank(), [2 * size()], "t_grs_grad_b").requires_grad_()
    ya, yb = hvd.grouped_reducescatter([a, b], op=hvd.Sum)
    (ya.sum() + 2 * yb.sum()).backward()
    assert torch.allclose(a.grad, torch.full_like(a, float(size())))
    assert torch.allclose(b.grad, torch.full_like(b, 2.0 * size()))


def test_reducescatter_errors() -> None:
    """Only Sum and Average (another op raises a RuntimeError, HorovodInternalError, as in
    Horovod, that is also a ValueError); no scalars; shapes must match on every rank."""
    for op in (hvd.Min, hvd.Max, hvd.Product, hvd.Adasum):
        with pytest.raises(hvd.HorovodInternalError, match="only supports AVERAGE and SUM") as err:
            hvd.reducescatter(torch.zeros(4), op=op)
        assert isinstance(err.value, RuntimeError) and isinstance(err.value, ValueError)
        with pytest.raises(RuntimeError, match="only supports AVERAGE and SUM"):
            hvd.grouped_reducescatter([torch.zeros(4)], op=op)
    with pytest.raises(ValueError):
        hvd.reducescatter(torch.tensor(3.0))
    shapes = [[4 + r] for r in range(size())]
    with pytest.raises(hvd.HoraError) as info:
        hvd.reducescatter(torch.zeros(shapes[rank()]), name="t_rs_err_shape")
    assert all(_shape_in_message(str(info.value), r, s) for r, s in enumerate(shapes))
    check_next_op_works("torch_rs_err")


# ------------------------------------------------------------------------ sparse, join, barrier


@pytest.mark.parametrize("op", ["sum", "average"])
def test_sparse_allreduce_async(op: str) -> None:
    """Sparse COO tensors are reduced by allgathering their indices and values."""

    def sparse_of(r: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(100 + r)
        rows = torch.randperm(10, generator=gen)[: 3 + r % 2]
        values = torch.randn(len(rows), 3, generator=gen, dtype=torch.float64)
        return torch.sparse_coo_tensor(rows.unsqueeze(0), values, (10, 3), check_invariants=True)

    handle = hvd.sparse_allreduce_async(sparse_of(rank()), name=f"t_sparse.{op}", op=OPS[op])
    result = hvd.synchronize(handle)
    assert result.is_sparse
    expected = sum(sparse_of(r).to_dense() for r in range(size()))
    if op == "average":
        expected = expected / size()
    assert torch.allclose(result.to_dense(), expected)


def test_sparse_allreduce_async_handle_is_callable() -> None:
    """As in Horovod, calling the handle waits and rebuilds the sparse tensor: the rows of every
    rank, uncoalesced, with the values averaged; coalesced it equals the dense average."""
    dense = [torch.zeros(6, 2, dtype=torch.float32) for _ in range(size())]
    for r in range(size()):
        dense[r][[0, (r + 2) % 6]] = torch.tensor([[1.0 + r, 2.0], [3.0, 4.0 * r + 1]])
    handles = [hvd.sparse_allreduce_async(dense[rank()].to_sparse(1), name=f"t_sp_call.{i}",
                                          op=hvd.Average) for i in range(2)]
    assert all(callable(h) for h in handles)
    results = [h() for h in handles]
    for result in results:
        assert result.is_sparse and result.dtype == torch.float32 and result.shape == (6, 2)
        assert result._nnz() == 2 * size() and not result.is_coalesced()
        torch.testing.assert_close(result.coalesce().to_dense(), sum(dense) / size())
    summed = hvd.sparse_allreduce_async(dense[rank()].to_sparse(1), name="t_sp_call.sum",
                                        op=hvd.Sum)
    torch.testing.assert_close(hvd.synchronize(summed).to_dense(), sum(dense))


def test_join_allreduce() -> None:
    """A joined rank contributes zeros; Average still divides by the full size."""
    joiner = size() - 1
    xs = all_arrays(13, "float64", "t_join")
    if rank() == joiner:
        last = hvd.join()
    else:
        out = hvd.allreduce(to_torch(xs[rank()]), name="t_join.avg")
        others = [x for r, x in enumerate(xs) if r != joiner]
        assert_close(to_numpy(out), reduce_ref(others, "sum", "float64") / size(), "float64")
        last = hvd.join()
    assert 0 <= last < size()
    gathered = hvd.allgather(torch.tensor([last]), name="t_join.last")
    assert gathered.tolist() == [last] * size()


def test_join_allgather_is_an_error() -> None:
    """While a rank has joined, allgather fails on the others."""
    if rank() == 0:
        hvd.join()
    else:
        with pytest.raises(RuntimeError, match="not supported with Join"):
            hvd.allgather(torch.zeros(2, 2), name="t_join_ag")
        hvd.join()
    check_next_op_works("torch_join_ag")


def test_barrier() -> None:
    """No rank leaves a barrier before every rank entered it.

    Each rank marks its entry in a shared directory just before the barrier; in round ``late``
    that rank waits first, so a rank let through early finds the late rank's mark missing.
    """
    shared = hvd.broadcast_object(
        tempfile.mkdtemp(prefix="hora-torch-barrier-") if rank() == 0 else None,
        root_rank=0,
        name="t_barrier.dir",
    )
    directory = Path(shared)
    for late in range(size()):
        if rank() == late:
            time.sleep(0.05)
        (directory / f"{late}.{rank()}").write_text("entered")
        hvd.barrier()
        missing = [q for q in range(size()) if not (directory / f"{late}.{q}").exists()]
        assert missing == [], f"round {late}: left the barrier before rank(s) {missing} entered it"
    hvd.barrier()  # every rank has checked before the directory goes
    if rank() == 0:
        shutil.rmtree(directory)


def test_synchronize_raises_horovod_internal_error_and_frees_name() -> None:
    """A failed async op raises from synchronize; its name can be used again afterwards."""
    shape = [2 + rank()]
    handle = hvd.allreduce_async(torch.zeros(shape), name="t_sync_err")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.synchronize(handle)
    assert hvd.synchronize(handle) is None
    out = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="t_sync_err")
    assert float(out.sum()) == 4 * size()


def test_float_dtypes_are_known() -> None:
    """The conftest dtype lists and the torch table agree."""
    assert set(FLOAT_DTYPES) <= set(TORCH_DTYPES)
    assert set(DTYPES) == set(TORCH_DTYPES)
