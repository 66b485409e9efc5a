"""hora.torch.ZeroRedundancyOptimizer: sharded optimizer state, updates inside backward.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_zero.py`` (N = 2, 3, 4).
Training with ZeRO is compared with the unsharded DistributedOptimizer on the same data, the
partition with PyTorch's own partitioning code, and the state kept per rank with the whole state.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import hora.torch as hvd
import pytest
import torch
import torch.nn.functional as F
from conftest import rank, size
from torch import nn
from torch_helpers import float_input

# The bucketed allreduce of ZeRO and the per-tensor allreduce of DistributedOptimizer may add
# the ranks' contributions in a different order (float64 rounding).
TOL = 1e-12

OPTIMIZERS: dict[str, tuple[type, dict]] = {
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True,
                                       "weight_decay": 0.01}),
    "adam": (torch.optim.Adam, {"lr": 0.01}),
    "adamw_amsgrad": (torch.optim.AdamW, {"lr": 0.01, "amsgrad": True}),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.1}),
    "rmsprop_no_functional_form": (torch.optim.RMSprop, {"lr": 0.01, "momentum": 0.5}),
}


def _model(seed: int = 5, frozen: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(),
                          nn.Linear(8, 3)).double()
    if frozen:
        model[2].bias.requires_grad_(False)
    return model


def _loss(model: nn.Module, step: int) -> torch.Tensor:
    x = float_input(rank(), [4, 6], "zero_x", step)
    y = float_input(rank(), [4, 3], "zero_y", step)
    return F.mse_loss(model(x), y)


def _train_zero(name: str, steps: int = 3, bucket_cap_mb: float = 0.001,
                frozen: bool = False) -> tuple[nn.Module, hvd.ZeroRedundancyOptimizer]:
    cls, kwargs = OPTIMIZERS[name]
    model = _model(frozen=frozen)
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), cls, bucket_cap_mb=bucket_cap_mb,
                                      **kwargs)
    for step in range(steps):
        opt.zero_grad()
        _loss(model, step).backward()
        opt.step()
    return model, opt


def _train_unsharded(name: str, steps: int = 3,
                     frozen: bool = False) -> tuple[nn.Module, torch.optim.Optimizer]:
    cls, kwargs = OPTIMIZERS[name]
    model = _model(frozen=frozen)
    opt = hvd.DistributedOptimizer(cls(model.parameters(), **kwargs),
                                   named_parameters=model.named_parameters())
    for step in range(steps):
        opt.zero_grad()
        _loss(model, step).backward()
        opt.step()
    return model, opt


def _assert_close_params(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=TOL, atol=TOL, msg=name)


def _assert_close_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for index, state in a["state"].items():
        assert state.keys() == b["state"][index].keys()
        for key, value in state.items():
            torch.testing.assert_close(value, b["state"][index][key], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("bucket_cap_mb", [0.001, 25.0])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_equals_unsharded_training(name: str, bucket_cap_mb: float) -> None:
    model, opt = _train_zero(name, bucket_cap_mb=bucket_cap_mb)
    reference, ref_opt = _train_unsharded(name)
    _assert_close_params(model, reference)
    opt.consolidate_state_dict(to=0)
    if rank() == 0:
        _assert_close_state(opt.state_dict(), ref_opt.state_dict())
    else:
        with pytest.raises(RuntimeError, match="consolidate_state_dict"):
            opt.state_dict()


def test_frozen_parameter() -> None:
    model, _ = _train_zero("adam", frozen=True)
    reference, _ = _train_unsharded("adam", frozen=True)
    _assert_close_params(model, reference)
    assert torch.equal(model[2].bias, _model()[2].bias)


def test_update_runs_inside_backward() -> None:
    model = _model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1,
                                      bucket_cap_mb=0.001)
    before = [p.detach().clone() for p in model.parameters()]
    owned = {id(p) for g in opt.optim.param_groups for p in g["params"]}
    _loss(model, 0).backward()
    assert all(p.grad is None for p in model.parameters())
    for p, b in zip(model.parameters(), before):
        if id(p) in owned:
            assert not torch.equal(p, b)
    opt.step()
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_without_functional_form_the_update_runs_in_step() -> None:
    model = _model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.RMSprop, lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    owned = {id(p) for g in opt.optim.param_groups for p in g["params"]}
    _loss(model, 0).backward()
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert all((p.grad is not None) == (id(p) in owned) for p in model.parameters())
    opt.step()
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())


def test_partition_matches_pytorch() -> None:
    """The owners are those PyTorch's ZeroRedundancyOptimizer computes (its own code, run on a
    stand-in object: it needs no process group to partition)."""
    with warnings.catch_warnings():  # torch.distributed.optim imports deprecated jit helpers
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero
    model = _model()
    params = list(model.parameters())
    groups = [{"params": params[:3]}, {"params": params[3:]}]
    opt = hvd.ZeroRedundancyOptimizer(groups, torch.optim.SGD, lr=0.1)

    class StandIn:
        _partition_parameters = TorchZero._partition_parameters
        _partition_param_group = TorchZero._partition_param_group
        _get_min_index = TorchZero._get_min_index

    stand_in = StandIn()
    stand_in.world_size = size()
    stand_in.param_groups = opt.param_groups
    stand_in._partition_parameters_cache = []
    expected = stand_in._partition_parameters()
    mine = opt._partition_parameters()
    for r in range(size()):
        assert [[id(p) for p in g["params"]] for g in mine[r]] == \
               [[id(p) for p in g["params"]] for g in expected[r]]
    assert [id(p) for g in opt.optim.param_groups for p in g["params"]] == \
           [id(p) for g in expected[rank()] for p in g["params"]]


def test_state_bytes_per_rank_is_a_shard() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(*[nn.Linear(32, 32, bias=False) for _ in range(12)]).double()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
    model(float_input(rank(), [2, 32], "zero_mem")).sum().backward()
    opt.step()
    mine = opt.state_bytes()
    per_rank = hvd.allgather(torch.tensor([mine]), name="zero_state_bytes").tolist()
    unsharded = 12 * 32 * 32 * 8 * 2 + 12 * 4  # exp_avg + exp_avg_sq per weight, float32 step
    assert sum(per_rank) == unsharded
    shard = 12 // size()
    assert max(per_rank) <= (shard + 1) * (32 * 32 * 8 * 2 + 4)
    assert min(per_rank) >= shard * (32 * 32 * 8 * 2 + 4)


def test_state_dict_round_trip() -> None:
    model, opt = _train_zero("adamw_amsgrad", steps=2)
    saved_params = copy.deepcopy(model.state_dict())
    opt.consolidate_state_dict(to=0)
    saved = hvd.broadcast_object(copy.deepcopy(opt.state_dict()) if rank() == 0 else None,
                                 root_rank=0, name="zero_saved_state")
    for step in range(2, 4):
        _loss(model, step).backward()
        opt.step()
    fresh = _model()
    fresh.load_state_dict(saved_params)
    cls, kwargs = OPTIMIZERS["adamw_amsgrad"]
    fresh_opt = hvd.ZeroRedundancyOptimizer(fresh.parameters(), cls, **kwargs)
    fresh_opt.load_state_dict(saved)
    for step in range(2, 4):
        _loss(fresh, step).backward()
        fresh_opt.step()
    _assert_close_params(model, fresh)


def test_loads_a_plain_optimizer_state() -> None:
    reference, ref_opt = _train_unsharded("adam", steps=2)
    saved = copy.deepcopy(ref_opt.state_dict())
    model = copy.deepcopy(reference)
    cls, kwargs = OPTIMIZERS["adam"]
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), cls, **kwargs)
    opt.load_state_dict(saved)
    for step in range(2, 4):
        ref_opt.zero_grad()
        _loss(reference, step).backward()
        ref_opt.step()
        _loss(model, step).backward()
        opt.step()
    _assert_close_params(model, reference)


def _global_loss(model: nn.Module, step: int) -> torch.Tensor:
    xs = [float_input(r, [4, 6], "zero_x", step) for r in range(size())]
    ys = [float_input(r, [4, 3], "zero_y", step) for r in range(size())]
    return F.mse_loss(model(torch.cat(xs)), torch.cat(ys))


def test_add_param_group_and_learning_rate_changes() -> None:
    """A group added after some steps and an lr changed between steps act as on one process
    training on the global batch."""
    def run(make: Callable[[list], torch.optim.Optimizer], loss_of: Callable) -> nn.Module:
        model = _model()
        params = list(model.parameters())
        opt = make(params[:4])
        for step in range(4):
            if step == 2:
                opt.add_param_group({"params": params[4:], "lr": 0.05})
                opt.param_groups[0]["lr"] = 0.02
            opt.zero_grad()
            loss_of(model, step).backward()
            opt.step()
        return model

    zero = run(lambda ps: hvd.ZeroRedundancyOptimizer(ps, torch.optim.Adam, lr=0.01), _loss)
    reference = run(lambda ps: torch.optim.Adam(ps, lr=0.01), _global_loss)
    for p, q in zip(zero.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-9)


def test_bad_input() -> None:
    model = _model()
    with pytest.raises(ValueError, match="empty parameter list"):
        hvd.ZeroRedundancyOptimizer([], torch.optim.SGD, lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        hvd.ZeroRedundancyOptimizer(next(model.parameters()), torch.optim.SGD, lr=0.1)
    with pytest.raises(NotImplementedError, match="overlap_with_ddp"):
        hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, overlap_with_ddp=True,
                                    lr=0.1)
    with pytest.raises(NotImplementedError, match="process_set"):
        hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, object(), lr=0.1)
    with pytest.raises(NotImplementedError, match="parameters_as_bucket_view"):
        hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD,
                                    parameters_as_bucket_view=True, lr=0.1)
    with pytest.raises(ValueError, match="same dense type"):
        hvd.ZeroRedundancyOptimizer([torch.zeros(2, requires_grad=True),
                                     torch.zeros(2, dtype=torch.float64, requires_grad=True)],
                                    torch.optim.SGD, lr=0.1)
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    _loss(model, 0).backward()
    with pytest.raises(AssertionError, match="computed twice"):
        _loss(model, 1).backward()
    opt.step()


def _train_in_set(ps: hvd.ProcessSet, members: list[int]) -> None:
    """Members of ``ps``: ZeRO over the set equals DistributedOptimizer over the set."""
    cls, kwargs = OPTIMIZERS["adam"]
    model, reference = _model(), _model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), cls, process_set=ps,
                                      bucket_cap_mb=0.001, **kwargs)
    ref_opt = hvd.DistributedOptimizer(cls(reference.parameters(), **kwargs),
                                       named_parameters=reference.named_parameters(),
                                       process_set=ps)
    for step in range(3):
        for m, o in ((model, opt), (reference, ref_opt)):
            o.zero_grad()
            _loss(m, step).backward()
            o.step()
    _assert_close_params(model, reference)
    opt.consolidate_state_dict(to=0)
    if rank() == members[0]:
        _assert_close_state(opt.state_dict(), ref_opt.state_dict())


def test_process_set() -> None:
    """ZeRO over the process set of every rank but 0: set ranks differ from global ranks
    for partition owners, broadcast roots and consolidation."""
    members = list(range(1, size()))
    ps = hvd.add_process_set(members)
    try:
        cls, kwargs = OPTIMIZERS["adam"]
        if rank() in members:
            _train_in_set(ps, members)
        else:
            with pytest.raises(ValueError, match="not in the process set"):
                hvd.ZeroRedundancyOptimizer(_model().parameters(), cls, process_set=ps, **kwargs)
    finally:
        hvd.remove_process_set(ps)
    # Rank 0 built no optimizer in the set: the names of the next global one still agree.
    model, _ = _train_zero("sgd_momentum", steps=2)
    _assert_close_params(model, _train_unsharded("sgd_momentum", steps=2)[0])

