"""The submit pipeline takes one tensor (the common case) and groups of tensors on separate
branches (hora.common.ops._submit, hora.torch's call): every check, conversion and result must be
the same on both. Each case runs with one tensor and with a group of two."""

from __future__ import annotations

import functools
import sys

import hora
import ml_dtypes
import numpy as np
import pytest
from hora.common import ops
from hora.common.process_sets import ProcessSet

COUNTS = [1, 2]


@pytest.fixture(scope="module", autouse=True)
def started():
    hora.init()
    yield


def arrays(count: int, dtype=np.float32, shape=(3,)) -> list[np.ndarray]:
    return [np.full(shape, i + 1, dtype=dtype) for i in range(count)]


def run(collective: str, buffers: list, **kwargs) -> list:
    """Submit through the shared pipeline and wait; the results of the engine handles."""
    handles = ops.enqueue(collective, buffers, grouped=len(buffers) > 1, **kwargs)
    ops.wait_all(handles)
    return [ops.handle_output(h) for h in handles]


def unknown_set() -> ProcessSet:
    """A set whose id the engine never registered (a member's refusal needs two ranks:
    tests/parallel/test_core_misc.py)."""
    unknown = ProcessSet([1])
    unknown.process_set_id = 7
    return unknown


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize(
    ("collective", "kwargs", "error", "message"),
    [
        ("allreduce", {"process_set": ProcessSet([0])}, ValueError,
         "allreduce: the process set .* is not registered"),
        ("allreduce", {"process_set": unknown_set()}, ValueError,
         r"allreduce: the process set \(id 7\) of tensor .* is not registered"),
        ("allreduce", {"op": 17}, ValueError, "allreduce: unknown reduce op 17"),
        ("allreduce", {"op": hora.Sum, "average": True}, ValueError, "supersedes average"),
        ("reducescatter", {"op": hora.Min}, hora.InvalidCollectiveError,
         "Reducescatter currently only supports AVERAGE and SUM."),
        ("broadcast", {"root_rank": 3}, ValueError,
         "broadcast received invalid root rank 3 for provided process set"),
        ("alltoall", {"splits": [1, 2]}, hora.InvalidCollectiveError,
         "Number of entries in splits does not equal number of workers."),
    ],
)
def test_every_check_fires(count, collective, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        run(collective, arrays(count), **kwargs)


@pytest.mark.parametrize("count", COUNTS)
def test_scalar_allgather_is_refused(count) -> None:
    with pytest.raises(ValueError, match="allgather needs a tensor of at least one dimension"):
        run("allgather", arrays(count, shape=()))


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ("not a tensor", TypeError, "expected a NumPy array, a tensor with __dlpack__"),
        (np.ones((4, 4), np.float32)[:, ::2], ValueError,
         r"tensor must be contiguous .*np\.ascontiguousarray\(array\) in NumPy"),
        (np.ones(2, np.complex64), ValueError,
         r"Tensor type complex64 is not supported\. Supported: uint8, .* and bool\."),
    ],
)
def test_every_conversion_error_fires(count, bad, error, message) -> None:
    buffers = [*arrays(count - 1), bad]
    with pytest.raises(error, match=message):
        run("allreduce", buffers)


@pytest.mark.parametrize("count", COUNTS)
def test_readonly_array_is_refused(count) -> None:
    readonly = np.ones(2, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="cannot export the tensor through DLPack"):
        run("allreduce", [*arrays(count - 1), readonly])


def test_repeated_name_within_a_group_is_refused() -> None:
    with pytest.raises(ValueError, match="same name as another tensor"):
        ops.enqueue("allreduce", arrays(2), names=["allreduce.twice", "allreduce.twice"])


@pytest.mark.parametrize("count", COUNTS)
def test_overridden_dtypes_come_back(count) -> None:
    """bfloat16 and bool cross with a dtype override; the outputs get their dtype back."""
    for dtype in (ml_dtypes.bfloat16, np.bool_):
        inputs = arrays(count, dtype=dtype)
        outputs = run("allgather", inputs)
        assert [o.dtype for o in outputs] == [np.dtype(dtype)] * count
        for got, sent in zip(outputs, inputs):
            np.testing.assert_array_equal(got, sent)


@pytest.mark.parametrize("count", COUNTS)
def test_engine_arguments(count, monkeypatch) -> None:
    """What reaches the engine, argument by argument: the request of one call."""
    calls = []
    real = ops._core.submit

    def spy(*args, **request):
        # The call site _core.submit finds from its caller's frame, found one frame deeper.
        calls.append((args, request, ops._core.call_site(request["hora_frames"] + 1)))
        return real(*args, **request)

    monkeypatch.setattr(ops._core, "submit", spy)
    submit = functools.partial(ops.enqueue, "allreduce", arrays(count), name="args",
                               grouped=count > 1, op=hora.Max, prescale=2.0, postscale=3.0)
    line = sys._getframe().f_lineno + 1
    handles = submit()
    ops.wait_all(handles)
    ((kind, _, names), request, site), = calls
    base = "allreduce.args" if count == 1 else "grouped_allreduce.args"
    expected = [base] if count == 1 else [f"{base}_{i + 1}of{count}" for i in range(count)]
    assert (kind, names) == (ops.ALLREDUCE, expected)
    assert {k: v for k, v in request.items() if k != "hora_frames"} == {
        "op": hora.Max, "prescale": 2.0, "postscale": 3.0, "root_rank": 0, "splits": None,
        "process_set_id": 0, "waits": False, "copy": False}
    assert site == f"test_submit_paths.py:{line}"


@pytest.mark.parametrize("count", COUNTS)
def test_numpy_results(count) -> None:
    inputs = arrays(count)
    single = count == 1
    in_place = (hora.allreduce_async_(inputs[0], op=hora.Sum, prescale_factor=2.0) if single
                else hora.grouped_allreduce_async_(inputs, op=hora.Sum, prescale_factor=2.0))
    result = in_place.wait()
    if single:
        assert result is inputs[0]
    else:
        assert all(r is i for r, i in zip(result, inputs))
    np.testing.assert_array_equal(inputs[0], np.full(3, 2.0, np.float32))
    gathered = (hora.allgather_async(inputs[0]) if single
                else hora.grouped_allgather_async(inputs)).wait()
    for got, sent in zip([gathered] if single else gathered, inputs):
        assert got is not sent
        np.testing.assert_array_equal(got, sent)


@pytest.mark.parametrize("count", COUNTS)
def test_torch_results_and_checks(count) -> None:
    torch = pytest.importorskip("torch")
    import hora.torch as hvd

    tensors = [torch.full((3,), float(i + 1), requires_grad=(i == 0)) for i in range(count)]
    single = count == 1
    if single:
        handle = hvd.allreduce_async_(tensors[0], op=hvd.Sum, prescale_factor=2.0)
    else:
        handle = hvd.grouped_allreduce_async_(tensors, op=hvd.Sum, prescale_factor=2.0)
    result = hvd.synchronize(handle)
    assert all(r is t for r, t in zip([result] if single else result, tensors))
    assert tensors[0].detach().tolist() == [2.0, 2.0, 2.0]  # written in place, through autograd
    strided = torch.ones(4, 4)[:, ::2]
    complex_ = torch.ones(2, dtype=torch.complex64)
    for bad, message in ((strided, "allreduce_async_: tensor is not contiguous"),
                         (complex_, "Tensor type torch.complex64 is not supported.")):
        with pytest.raises(ValueError, match=message):
            if single:
                hvd.allreduce_async_(bad)
            else:
                hvd.grouped_allreduce_async_([torch.ones(3), bad])
    with pytest.raises(ValueError, match="broadcast received invalid root rank 3"):
        hvd.broadcast_async_(tensors[-1], 3)


def test_numpy_arrays_and_capsules_share_memory() -> None:
    """A NumPy array reaches the engine through its own ``__dlpack__``, sharing its memory, and
    so does a capsule made by the caller: the engine writes into the array either way."""
    array = np.arange(4, dtype=np.float32)
    ops.wait_all(ops.enqueue("allreduce", [array], names=["allreduce.array_shares"],
                             op=hora.Sum, prescale=3.0))
    np.testing.assert_array_equal(array, np.arange(4, dtype=np.float32) * 3)
    ops.wait_all(ops.enqueue("allreduce", [array.__dlpack__()],
                             names=["allreduce.capsule_shares"], op=hora.Sum, prescale=2.0))
    np.testing.assert_array_equal(array, np.arange(4, dtype=np.float32) * 6)


def test_torch_parameters_are_reduced_in_place() -> None:
    """Plain tensors outside autograd cross as they are; parameters, frozen or not, through
    ``detach()``: either way the engine writes into their memory."""
    torch = pytest.importorskip("torch")
    import hora.torch as hvd

    for requires_grad in (False, True):
        param = torch.nn.Parameter(torch.ones(2), requires_grad=requires_grad)
        result = hvd.synchronize(hvd.allreduce_async_(param, op=hvd.Sum, prescale_factor=3.0))
        assert result is param
        assert param.detach().tolist() == [3.0, 3.0]


def test_blocking_calls_say_that_they_wait(monkeypatch) -> None:
    """Every blocking call tells the engine that its caller waits at once (``waits=True``, so a
    waiting thread that drives the engine finds the work still to do); the ``*_async`` forms,
    whose callers go on, do not."""
    import hora.torch as hvd
    import torch

    seen = []
    real = ops._core.submit

    def spy(*args, **request):
        seen.append(request.get("waits", False))
        return real(*args, **request)

    monkeypatch.setattr(ops._core, "submit", spy)
    t = torch.ones(2)
    a = np.ones(2, np.float32)
    blocking = [
        lambda: hora.allreduce(a, name="w.1"), lambda: hora.allreduce_(a, name="w.2"),
        lambda: hora.allgather(a, name="w.3"), lambda: hora.broadcast(a, 0, name="w.4"),
        lambda: hora.broadcast_(a, 0, name="w.5"), lambda: hora.barrier(),
        lambda: hvd.allreduce(t, name="w.6"), lambda: hvd.allreduce_(t, name="w.7"),
        lambda: hvd.grouped_allreduce_([t], name="w.8"), lambda: hvd.broadcast_(t, 0, name="w.9"),
        lambda: hvd.allgather(t, name="w.10"), lambda: hvd.broadcast(t, 0, name="w.11"),
    ]
    for call in blocking:
        seen.clear()
        call()
        assert seen == [True], call
    seen.clear()
    hora.allreduce_async(a, name="w.12").wait()
    hvd.synchronize(hvd.allreduce_async_(t, name="w.13"))
    assert seen == [False, False]


def test_a_blocking_submission_returns_once_every_operation_finished() -> None:
    """``waits=True`` makes the submission itself wait: the inputs come back reduced and an
    allgather's handles finished, so the blocking calls need no wait of their own. An operation
    that writes into its buffers returns no handles: its result is there."""
    for round_ in range(20):
        buffers = arrays(40, shape=(257,))
        handles = ops.enqueue("allreduce", buffers, name=f"blocking.{round_}", grouped=True,
                              op=hora.Sum, waits=True)
        assert handles == []
        assert all(np.array_equal(b, np.full(257, i + 1, np.float32))
                   for i, b in enumerate(buffers))
        inputs = arrays(40, shape=(3,))
        gathered = ops.enqueue("allgather", inputs, name=f"blocking.gather.{round_}",
                               grouped=True, waits=True)
        assert [h.poll() for h in gathered] == [True] * 40
        assert all(np.array_equal(ops.handle_output(h), x) for h, x in zip(gathered, inputs))


def test_the_blocking_torch_calls_give_what_the_general_path_gives() -> None:
    """``allreduce_``, ``allreduce`` and ``broadcast_`` take a shorter path for a plain CPU tensor
    (hora.torch._async_ops.run_one); every other tensor still goes through the general checks,
    and both give the same results and errors."""
    import hora.torch as hvd
    import torch

    plain = torch.arange(4, dtype=torch.float32)
    assert hvd.allreduce_(plain, op=hvd.Sum) is plain
    out = hvd.allreduce(plain, op=hvd.Sum)
    assert out is not plain and out.tolist() == plain.tolist() == [0.0, 1.0, 2.0, 3.0]
    out[0] = 7.0
    assert plain[0].item() == 0.0  # a copy
    assert hvd.broadcast_(plain, 0) is plain
    leaf = torch.ones(3, requires_grad=True)
    assert hvd.allreduce_(leaf, op=hvd.Sum) is leaf and leaf.tolist() == [1.0, 1.0, 1.0]
    strided = torch.arange(8, dtype=torch.float32)[::2]
    with pytest.raises(ValueError, match="not contiguous"):
        hvd.allreduce_(strided)
    assert hvd.allreduce(strided, op=hvd.Sum).tolist() == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(ValueError, match="Tensor type torch.complex64 is not supported"):
        hvd.allreduce_(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="expects a torch.Tensor"):
        hvd.allreduce_([1.0, 2.0])


ENGINE_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16,
                 np.float32, np.float64, np.bool_, ml_dtypes.bfloat16]


class Capsule:
    """A result capsule as NumPy imports it: an object with ``__dlpack__``."""

    def __init__(self, capsule) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def from_capsule(capsule, dtype) -> np.ndarray:
    """NumPy takes no bfloat16 through DLPack: those results are read through torch."""
    if dtype == ml_dtypes.bfloat16:
        import torch

        return torch.from_dlpack(capsule).view(torch.int16).numpy().view(dtype)
    return np.from_dlpack(Capsule(capsule))


@pytest.mark.parametrize("dtype", ENGINE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_call_on_a_copy_leaves_its_tensors_as_they_were(dtype) -> None:
    """``copy=True``: the engine works on its own copy of each tensor and returns the copies as
    DLPack capsules of the tensors' dtype and shape; the tensors keep their values."""
    for count in COUNTS:
        inputs = [np.arange(i, i + 6, dtype=np.int64).reshape(2, 3).astype(dtype)
                  for i in range(count)]
        before = [x.copy() for x in inputs]
        for collective, scale in (("allreduce", 3.0), ("broadcast", 1.0)):
            kwargs = {"op": hora.Sum, "prescale": scale} if collective == "allreduce" else {}
            got = ops.enqueue(collective, inputs, grouped=count > 1, waits=True, copy=True,
                              name=f"copy.{collective}.{np.dtype(dtype).name}", **kwargs)
            for capsule, x in zip(got, before):
                result = from_capsule(capsule, dtype)
                expected = x if scale == 1.0 or dtype == np.bool_ else (x * dtype(scale))
                assert result.shape == x.shape and result.dtype == x.dtype
                np.testing.assert_array_equal(result, expected)
            for x, b in zip(inputs, before):
                np.testing.assert_array_equal(x, b)


def test_a_call_on_a_copy_is_a_blocking_allreduce_adasum_or_broadcast() -> None:
    with pytest.raises(ValueError, match="copy=True takes ALLREDUCE, ADASUM or BROADCAST, "
                                         "not ALLGATHER"):
        ops.enqueue("allgather", arrays(1), name="copy.refused", copy=True, waits=True)
    with pytest.raises(ValueError, match=r"copy=True is for blocking calls \(waits\)"):
        ops.enqueue("allreduce", arrays(1), name="copy.async", copy=True)
    # An empty tensor and a scalar are copied too.
    empty, scalar = np.ones((0, 4), np.float32), np.full((), 2.0, np.float32)
    out = ops.enqueue("allreduce", [empty, scalar], grouped=True, name="copy.edges",
                      op=hora.Sum, waits=True, copy=True)
    got = [from_capsule(c, np.float32) for c in out]
    assert [g.shape for g in got] == [(0, 4), ()] and got[1] == 2.0


def test_torch_out_of_place_results_are_new_tensors_of_every_dtype() -> None:
    """``allreduce`` of a plain CPU tensor runs on the engine's copy: a new tensor of the input's
    dtype and shape, holding the result, the input untouched (and so does ``broadcast``). Its
    memory is the engine's (as allgather's results are), so ``resize_`` raises."""
    import hora.torch as hvd
    import torch

    dtypes = [torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool]
    for dtype in dtypes:
        x = torch.arange(6).reshape(3, 2).to(dtype)
        before = x.clone()
        scale = 1.0 if dtype == torch.bool else 2.0
        reduced = hvd.allreduce(x, op=hvd.Sum, prescale_factor=scale)
        broadcast = hvd.broadcast(x, 0)
        assert torch.equal(x, before)
        doubled = (before.to(torch.int64) * int(scale)).to(dtype)
        for out, expected in ((reduced, doubled), (broadcast, before)):
            assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
            assert out.data_ptr() != x.data_ptr()
            assert torch.equal(out, expected), (dtype, out, expected)
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    out += 1
    assert out.tolist() == [2.0, 2.0]
    # docs/coming-from-horovod.md: the results of these calls cannot be resized.
    x = torch.ones(2)
    for result in (out, hvd.allgather(x), hvd.alltoall(x), hvd.reducescatter(x)):
        with pytest.raises(RuntimeError, match="not resizable"):
            result.resize_(4)
