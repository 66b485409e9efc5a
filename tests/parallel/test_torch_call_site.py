"""The call site a torch collective records (what a stall report names) is the user's line.

Run as ``horarun -np N python -m pytest -q tests/parallel/test_torch_call_site.py`` (N = 2, 3, 4).
A differentiable op goes through ``torch.autograd.Function.apply``, so the first frame outside
Hora is torch's; the recorded site must still be the line in this file that called Hora.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import hora.torch as hvd
import pytest
import torch
from conftest import rank, size
from hora.common import ops

HERE = os.path.basename(__file__)


@pytest.fixture
def recorded_sites(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The call site of every call this rank submits while the test runs: what ``_core.submit``
    finds from its caller's frame with the ``hora_frames`` it was given, found here one frame
    deeper."""
    sites: list[str] = []
    submit = ops._core.submit

    def recording(*args: Any, **request: Any) -> Any:
        sites.append(ops._core.call_site(request.get("hora_frames", 0) + 1))
        return submit(*args, **request)

    monkeypatch.setattr(ops._core, "submit", recording)
    return sites


def _line_after() -> int:
    """The number of the line after the caller's."""
    caller = inspect.currentframe().f_back  # type: ignore[union-attr]
    return caller.f_lineno + 1  # type: ignore[union-attr]


def test_differentiable_allreduce_names_user_line(recorded_sites: list[str]) -> None:
    x = torch.full((4,), float(rank() + 1), dtype=torch.float64, requires_grad=True)
    forward_line = _line_after()
    y = hvd.allreduce(x, op=hvd.Sum, name="call_site.grad")
    backward_line = _line_after()
    y.sum().backward()
    assert torch.equal(y.detach(), torch.full((4,), float(size() * (size() + 1) // 2),
                                              dtype=torch.float64))
    assert torch.equal(x.grad, torch.full((4,), float(size()), dtype=torch.float64))
    assert recorded_sites[0] == f"{HERE}:{forward_line}"
    # The gradient's allreduce runs inside autograd's engine, below the line that called
    # backward(); every frame in between belongs to torch or Hora.
    assert recorded_sites[1:] == [f"{HERE}:{backward_line}"]


def test_plain_and_grouped_ops_name_user_line(recorded_sites: list[str]) -> None:
    x = torch.arange(6, dtype=torch.float32)
    lines = [_line_after()]
    hvd.allgather(x, name="call_site.allgather")
    lines.append(_line_after())
    hvd.grouped_allreduce([x, x + 1], op=hvd.Sum, name="call_site.grouped")
    lines.append(_line_after())
    hvd.broadcast_(x, root_rank=0, name="call_site.broadcast")
    assert recorded_sites == [f"{HERE}:{line}" for line in lines]
