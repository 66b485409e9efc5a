"""The ``hora`` torch.distributed backend's operations built from Hora's collectives: reduce,
gather and scatter to and from every root, all_to_all with tensor lists, the coalesced forms,
the bitwise reductions and sparse all_reduce, each against a NumPy reference (every dtype, sizes
0, 1, odd, not divisible by the rank count, big)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import (
    DTYPES,
    INT_DTYPES,
    SIZES,
    all_inputs,
    assert_same,
    kind_for_op,
    rank,
    reduce_ref,
    resolve_count,
    size,
)
from torch_helpers import DIST_OPS, TORCH_DTYPES, check_reduction, to_numpy, to_torch

BITWISE = {"band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
NP_BITWISE = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}
ROOTS = ["first", "last"]


@pytest.fixture(scope="module", autouse=True)
def hora_default_group() -> Iterator[None]:
    dist.init_process_group(backend="hora")
    yield
    dist.destroy_process_group()


def root_of(which: str) -> int:
    return 0 if which == "first" else size() - 1



def bitwise_ref(arrays: list[np.ndarray], op: str) -> np.ndarray:
    return NP_BITWISE[op].reduce(np.stack(arrays), axis=0)


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(DIST_OPS))
def test_reduce_gives_the_root_the_reduction_and_leaves_the_others_alone(
        op: str, dtype: str, count: int | str, root: str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "dist_reduce", op, root, kind=kind_for_op(op))
    tensor = to_torch(xs[rank()])
    dist.reduce(tensor, dst=root_of(root), op=DIST_OPS[op])
    expected = reduce_ref(xs, op, dtype) if rank() == root_of(root) else xs[rank()]
    check_reduction(tensor, expected, dtype, op)


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", [*INT_DTYPES, "bool"])
@pytest.mark.parametrize("op", list(BITWISE))
def test_bitwise_all_reduce_matches_numpy(op: str, dtype: str, count: int | str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs(n, dtype, "dist_bitwise", op, kind="any")
    tensor = to_torch(xs[rank()])
    dist.all_reduce(tensor, op=BITWISE[op])
    assert_same(to_numpy(tensor), bitwise_ref(xs, op), dtype)


@pytest.mark.parametrize("op", list(BITWISE))
def test_bitwise_reduce_and_reduce_scatter_match_numpy(op: str) -> None:
    xs = all_inputs((size(), 5), "int32", "dist_bitwise_rs", op, kind="any")
    tensor = to_torch(xs[rank()].copy())
    dist.reduce(tensor, dst=size() - 1, op=BITWISE[op])
    if rank() == size() - 1:
        assert_same(to_numpy(tensor), bitwise_ref(xs, op), "int32")
    out = torch.empty(5, dtype=torch.int32)
    dist.reduce_scatter_tensor(out, to_torch(xs[rank()]), op=BITWISE[op])
    assert_same(to_numpy(out), bitwise_ref([x[rank()] for x in xs], op), "int32")


def test_bitwise_reductions_refuse_float_tensors() -> None:
    with pytest.raises(ValueError, match="needs integer or bool tensors, got torch.float32"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
    dist.all_reduce(torch.ones(1))  # the group goes on


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_collects_every_rank_in_rank_order_at_the_root(
        dtype: str, count: int | str, root: str) -> None:
    n = resolve_count(count, dtype)
    xs = all_inputs((n, 2), dtype, "dist_gather", root, kind="any")
    dst = root_of(root)
    outputs = ([torch.empty((n, 2), dtype=TORCH_DTYPES[dtype]) for _ in range(size())]
               if rank() == dst else None)
    dist.gather(to_torch(xs[rank()]), outputs, dst=dst)
    if rank() == dst:
        assert outputs is not None
        for r in range(size()):
            assert_same(to_numpy(outputs[r]), xs[r], dtype)


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_gives_each_rank_its_piece_of_the_root_list(
        dtype: str, count: int | str, root: str) -> None:
    n = resolve_count(count, dtype)
    src = root_of(root)
    pieces = all_inputs(n, dtype, "dist_scatter", root, kind="any", ranks=[src] * size())
    pieces = [np.roll(p, i) for i, p in enumerate(pieces)]
    out = torch.empty(n, dtype=TORCH_DTYPES[dtype])
    dist.scatter(out, [to_torch(p) for p in pieces] if rank() == src else None, src=src)
    assert_same(to_numpy(out), pieces[rank()], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all_lists_move_pieces_of_different_sizes(dtype: str) -> None:
    """Rank r sends r + i + 1 elements to rank i (so every pair exchanges its own size)."""
    def piece(src: int, dst: int) -> np.ndarray:
        return all_inputs(src + dst + 1, dtype, "dist_a2a", src, dst, kind="any", ranks=[src])[0]

    inputs = [to_torch(piece(rank(), i)) for i in range(size())]
    outputs = [torch.empty(r + rank() + 1, dtype=TORCH_DTYPES[dtype]) for r in range(size())]
    dist.all_to_all(outputs, inputs)
    for r in range(size()):
        assert_same(to_numpy(outputs[r]), piece(r, rank()), dtype)


def test_all_to_all_with_wrong_output_sizes_fails_clearly() -> None:
    inputs = [torch.ones(2) for _ in range(size())]
    outputs = [torch.empty(3) for _ in range(size())]
    with pytest.raises(ValueError, match=r"all_to_all received \[2(, 2)*\] elements"):
        dist.all_to_all(outputs, inputs)


def test_all_gather_coalesced_gathers_each_tensor_of_every_rank() -> None:
    xs = all_inputs(7, "int64", "dist_agc", kind="any")
    ys = all_inputs((3, 2), "int64", "dist_agc", kind="any")
    outputs = [[torch.empty(7, dtype=torch.int64), torch.empty((3, 2), dtype=torch.int64)]
               for _ in range(size())]
    dist.all_gather_coalesced(outputs, [to_torch(xs[rank()]), to_torch(ys[rank()])])
    for r in range(size()):
        assert_same(to_numpy(outputs[r][0]), xs[r], "int64")
        assert_same(to_numpy(outputs[r][1]), ys[r], "int64")


def test_coalescing_manager_runs_gathers_and_reduce_scatters_together() -> None:
    """torch's _coalescing_manager (FSDP's path) hands the backend lists of tensors."""
    xs = all_inputs(4, "float32", "dist_cm")
    gathered = [torch.empty(4 * size()) for _ in range(2)]
    with dist._coalescing_manager():
        for out in gathered:
            dist.all_gather_into_tensor(out, to_torch(xs[rank()]))
    for out in gathered:
        assert_same(to_numpy(out), np.concatenate(xs), "float32")
    big = all_inputs(3 * size(), "float32", "dist_cm_rs")
    outs = [torch.empty(3), torch.empty(3)]
    with dist._coalescing_manager():
        for out in outs:
            dist.reduce_scatter_tensor(out, to_torch(big[rank()]))
    for out in outs:
        assert_same(to_numpy(out), reduce_ref(big, "sum", "float32")[3 * rank():3 * rank() + 3],
                    "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_sparse_all_reduce_sums_every_rank_s_entries(dtype: str) -> None:
    """Each rank holds some entries of a 2 x 6 x 3 tensor (sparse in its first two dimensions),
    overlapping with the others'; the sum equals the dense sum."""
    def dense(r: int) -> np.ndarray:
        values = all_inputs((2, 6, 3), dtype, "dist_sparse", kind="sum", ranks=[r])[0]
        keep = all_inputs((2, 6), "bool", "dist_sparse_mask", ranks=[r])[0]
        return values * keep[:, :, None]

    mine = torch.from_numpy(dense(rank())).to_sparse(2)
    dist.all_reduce(mine)
    assert mine.is_sparse
    assert_same(mine.to_dense().numpy(), sum(dense(r) for r in range(size())), dtype)


def test_sparse_all_reduce_supports_sum_only() -> None:
    tensor = torch.ones(3).to_sparse()
    with pytest.raises(ValueError, match="sparse tensor supports SUM only"):
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)


def test_object_collectives_carry_python_objects() -> None:
    """torch's object collectives ride on broadcast, all_gather, gather and scatter."""
    mine = {"rank": rank(), "items": list(range(rank() + 1))}
    objects: list = [mine if rank() == 0 else None]
    dist.broadcast_object_list(objects, src=0)
    assert objects == [{"rank": 0, "items": [0]}]
    gathered: list = [None] * size()
    dist.all_gather_object(gathered, mine)
    assert [g["rank"] for g in gathered] == list(range(size()))
    at_root: list | None = [None] * size() if rank() == size() - 1 else None
    dist.gather_object(mine, at_root, dst=size() - 1)
    if at_root is not None:
        assert [g["items"] for g in at_root] == [list(range(r + 1)) for r in range(size())]
    received: list = [None]
    dist.scatter_object_list(received, [f"to {r}" for r in range(size())] if rank() == 0
                             else None, src=0)
    assert received == [f"to {rank()}"]
