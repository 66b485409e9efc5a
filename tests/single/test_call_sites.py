"""The call site every entry of the submit pipeline records is the caller's line in this file.

The pipeline's functions tell the call-site search how many of the frames above them are
certainly Hora's own, so that it skips them without looking (hora.common.call_sites.call_site's
``skip``); a count one too high would skip the user's frame and name a line further up, one too
low only costs time. Each case calls one entry point from a line of this file and compares.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import hora
import hora.torch as hvd
import numpy as np
import pytest
import torch
from hora.common import ops
from hora.torch import _async_ops

HERE = os.path.basename(__file__)


@pytest.fixture(scope="module", autouse=True)
def started():
    hora.init()
    yield


@pytest.fixture
def recorded_sites(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The call site of every call submitted while the test runs: what ``_core.submit`` finds
    from its caller's frame with the ``hora_frames`` it was given, found here one frame
    deeper."""
    sites: list[str] = []
    submit = ops._core.submit

    def recording(*args: Any, **request: Any) -> Any:
        sites.append(ops._core.call_site(request.get("hora_frames", 0) + 1))
        return submit(*args, **request)

    monkeypatch.setattr(ops._core, "submit", recording)
    return sites


def _array() -> np.ndarray:
    return np.ones(3, dtype=np.float32)


def _tensor() -> torch.Tensor:
    return torch.ones(3)


def _wait(result: Any) -> None:
    """Finish whatever an entry point returned (an AsyncResult, an int handle, handles, a value)."""
    if isinstance(result, ops.AsyncResult):
        result.wait()
    elif isinstance(result, int):
        hvd.synchronize(result)
    elif isinstance(result, list) and result and hasattr(result[0], "wait"):
        ops.wait_all(result)


# Each case calls its entry point on the line right after the ``line = ...`` statement.
def _numpy_async(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hora.allreduce_async_(_array(), op=hora.Sum, name=n)


def _numpy_blocking(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hora.allreduce(_array(), op=hora.Sum, name=n)


def _numpy_grouped(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hora.grouped_allreduce_async_([_array(), _array()], op=hora.Sum, name=n)


def _numpy_allgather(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hora.allgather(_array(), name=n)


def _numpy_broadcast(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hora.broadcast_(_array(), root_rank=0, name=n)


def _ops_enqueue(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, ops.enqueue("allreduce", [_array()], name=n, op=ops.Sum)


def _torch_async(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hvd.allreduce_async_(_tensor(), op=hvd.Sum, name=n)


def _torch_blocking(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hvd.allreduce_(_tensor(), op=hvd.Sum, name=n)


def _torch_out_of_place(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hvd.allreduce(_tensor(), op=hvd.Sum, name=n)


def _torch_grouped_in_place(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hvd.grouped_allreduce_([_tensor(), _tensor()], op=hvd.Sum, name=n)


def _torch_broadcast_in_place(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hvd.broadcast_(_tensor(), 0, name=n)


def _torch_grouped(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, hvd.grouped_allreduce_async([_tensor(), _tensor()], op=hvd.Sum, name=n)


def _torch_call(n: str) -> tuple[int, Any]:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    return line, _async_ops.call("allreduce", [_tensor()], False, "test", op=hvd.Sum, name=n)


CASES: list[Callable[[str], tuple[int, Any]]] = [
    _numpy_async, _numpy_blocking, _numpy_grouped, _numpy_allgather, _numpy_broadcast,
    _ops_enqueue, _torch_async, _torch_blocking, _torch_out_of_place, _torch_grouped_in_place,
    _torch_broadcast_in_place, _torch_grouped, _torch_call,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.lstrip("_") for c in CASES])
def test_call_site_is_the_callers_line(case: Callable[[str], tuple[int, Any]],
                                       recorded_sites: list[str]) -> None:
    line, result = case(f"call_sites.{case.__name__}")
    _wait(result)
    assert recorded_sites
    assert recorded_sites == [f"{HERE}:{line}"] * len(recorded_sites)


def test_each_line_of_one_function_is_its_own_site(recorded_sites: list[str]) -> None:
    """Sites are remembered per code object and instruction: two submissions from one function
    name two lines, each again when run again."""
    lines = []
    for _ in range(2):
        lines.append(inspect.currentframe().f_lineno + 1)  # type: ignore[union-attr]
        hvd.allreduce_(_tensor(), op=hvd.Sum, name="call_sites.first")
        lines.append(inspect.currentframe().f_lineno + 1)  # type: ignore[union-attr]
        hvd.allreduce_(_tensor(), op=hvd.Sum, name="call_sites.second")
    assert recorded_sites == [f"{HERE}:{line}" for line in lines]


def test_call_site_from_a_shallow_stack_falls_back_to_looking_at_every_frame() -> None:
    from hora.common.call_sites import call_site

    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    assert call_site(10_000) == f"{HERE}:{line}"


def test_a_given_call_site_holds_for_its_thread_until_replaced(recorded_sites: list[str]) -> None:
    """What a graph node submits names the site given to its thread (the line that built the
    node); other threads, and this one once the site is taken back, look at the stack."""
    import threading

    from hora.common.call_sites import call_site, give_call_site, run_as_if_from

    assert give_call_site("model.py:7") == ""
    try:
        assert call_site() == "model.py:7"
        elsewhere: list[str] = []
        thread = threading.Thread(target=lambda: elsewhere.append(call_site()))
        thread.start()
        thread.join()
        assert elsewhere[0] != "model.py:7"
    finally:
        assert give_call_site("") == "model.py:7"
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    assert call_site() == f"{HERE}:{line}"

    ops.wait_all(run_as_if_from("train.py:3", lambda: ops.enqueue("allreduce", [_array()])))
    assert recorded_sites == ["train.py:3"]
    assert call_site() == f"{HERE}:{inspect.currentframe().f_lineno}"  # type: ignore[union-attr]
