"""The GPU path with torch CUDA tensors, for machines with GPUs (one per rank):

    horarun -np <GPUs> python -m pytest tests/gpu/test_torch_cuda.py

Not part of tests/run_all.sh: this project has no GPU, and the file fails without CUDA rather
than pretend. Each rank uses cuda:<local rank>; results are checked against the same ops on CPU
tensors (the TCP path).
"""
from __future__ import annotations

import hora.torch as hvd
import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def engine():
    if not torch.cuda.is_available():
        pytest.fail("these tests need CUDA: run them on a machine with one GPU per rank")
    hvd.init()
    torch.cuda.set_device(hvd.local_rank())
    assert hvd.nccl_built() > 0, "NCCL did not load: see hora.common.gpu.info()"
    yield
    hvd.shutdown()


def values(rank: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(17 + rank)
    return torch.randint(-4, 5, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_allreduce_matches_cpu(dtype: torch.dtype) -> None:
    cpu = values(hvd.rank(), (1001,), dtype)
    gpu = hvd.allreduce(cpu.cuda(), op=hvd.Sum, name=f"ar.{dtype}")
    assert gpu.is_cuda
    torch.testing.assert_close(gpu.cpu(), hvd.allreduce(cpu, op=hvd.Sum, name=f"ar.cpu.{dtype}"))


def test_allreduce_waits_for_a_slow_producer() -> None:
    # Horovod PR #363: the producer's kernel is still running when the collective is enqueued.
    t = torch.zeros(1 << 20, device="cuda")
    torch.cuda._sleep(200_000_000)
    t.fill_(hvd.rank() + 1)
    hvd.allreduce_(t, op=hvd.Sum, name="slow")
    expected = float(sum(range(1, hvd.size() + 1)))
    assert torch.all(t == expected).item()


def test_allgather_broadcast_alltoall_reducescatter_match_cpu() -> None:
    n, me = hvd.size(), hvd.rank()
    cpu = values(me, (me + 2, 3), torch.float32)
    torch.testing.assert_close(hvd.allgather(cpu.cuda(), name="ag").cpu(),
                               hvd.allgather(cpu, name="ag.cpu"))
    b = values(me, (7,), torch.float32)
    torch.testing.assert_close(hvd.broadcast(b.cuda(), root_rank=0, name="bc").cpu(),
                               hvd.broadcast(b, root_rank=0, name="bc.cpu"))
    splits = torch.tensor([(me + j) % 3 for j in range(n)], dtype=torch.int32)
    a = values(me, (int(splits.sum()), 2), torch.float32)
    out, got = hvd.alltoall(a.cuda(), splits=splits, name="a2a")
    ref, ref_got = hvd.alltoall(a, splits=splits, name="a2a.cpu")
    torch.testing.assert_close(out.cpu(), ref)
    assert got.tolist() == ref_got.tolist()
    r = values(me, (2 * n + 1, 2), torch.float32)
    torch.testing.assert_close(hvd.reducescatter(r.cuda(), op=hvd.Sum, name="rs").cpu(),
                               hvd.reducescatter(r, op=hvd.Sum, name="rs.cpu"))
