"""The shared frontend pipeline of hora.common without a running engine: the op table against
the engine's enums, op resolution, the one error policy, the gradient arithmetic, the compression
base and the export list every frontend extends."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hora import _core
from hora.common import api, gradients, ops
from hora.common.compression import NoneCompressor, make_compression
from hora.errors import HoraError, HoraTimeoutError, InvalidCollectiveError, MismatchError


def test_constants_are_the_engine_enums() -> None:
    assert ops.ALLREDUCE == int(_core.OpKind.ALLREDUCE)
    assert ops.ADASUM == int(_core.OpKind.ADASUM)
    assert ops.REDUCESCATTER == int(_core.OpKind.REDUCESCATTER)
    assert (ops.Average, ops.Sum, ops.Adasum, ops.Min, ops.Max, ops.Product) == tuple(
        int(getattr(_core.ReduceOp, n)) for n in ("AVERAGE", "SUM", "ADASUM", "MIN", "MAX",
                                                   "PRODUCT"))
    # Horovod's numbering, which scripts pass as plain ints.
    assert (ops.Average, ops.Sum, ops.Adasum, ops.Min, ops.Max, ops.Product) == (0, 1, 2, 3, 4, 5)


def test_op_table() -> None:
    assert {name: spec.kind for name, spec in ops.OPS.items()} == {
        "allreduce": ops.ALLREDUCE, "allgather": ops.ALLGATHER, "broadcast": ops.BROADCAST,
        "alltoall": ops.ALLTOALL, "reducescatter": ops.REDUCESCATTER, "join": ops.JOIN,
        "barrier": ops.BARRIER}
    assert [n for n, s in ops.OPS.items() if s.in_place] == ["allreduce", "broadcast", "join",
                                                              "barrier"]
    assert ops.OPS["reducescatter"].reduce_ops == {ops.Average, ops.Sum}
    assert ops.OPS["allreduce"].grouped_prefix == "grouped_allreduce"


def test_resolve_allreduce() -> None:
    assert ops.resolve_allreduce(None, None) == (ops.ALLREDUCE, ops.Average)
    assert ops.resolve_allreduce(ops.Adasum, None) == (ops.ADASUM, ops.Adasum)
    assert ops.resolve_allreduce(ops.Max, None) == (ops.ALLREDUCE, ops.Max)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert ops.resolve_allreduce(None, False) == (ops.ALLREDUCE, ops.Sum)
    with pytest.raises(ValueError, match="supersedes average"):
        ops.resolve_allreduce(ops.Sum, True)


class _Fake:
    """An engine handle that finishes with ``error`` (or succeeds, or never finishes)."""

    def __init__(self, error: BaseException | None = None, finishes: bool = True) -> None:
        self.error, self.finishes, self.waited = error, finishes, False

    def wait(self, timeout: float | None = None) -> bool:
        self.waited = True
        if self.error is not None:
            raise self.error
        return self.finishes

    def poll(self) -> bool:
        return True


@pytest.mark.parametrize(("raised", "expected"), [
    (ValueError("refused"), InvalidCollectiveError),
    (RuntimeError("broken"), HoraError),
    (MismatchError("shapes"), MismatchError),
    (TypeError("odd"), TypeError),
])
def test_one_error_policy(raised: BaseException, expected: type) -> None:
    handles = [_Fake(), _Fake(raised), _Fake(RuntimeError("second")), _Fake()]
    with pytest.raises(expected, match=str(raised)) as info:
        ops.wait_all(handles)
    assert type(info.value) is expected
    assert all(h.waited for h in handles)  # every name is freed before the error is raised
    if expected is InvalidCollectiveError:  # both old assertions keep holding
        assert isinstance(info.value, ValueError) and isinstance(info.value, HoraError)


def test_every_frontend_raises_the_same_class() -> None:
    result = ops.AsyncResult([_Fake(ValueError("refused"))], lambda hs: None)
    with pytest.raises(InvalidCollectiveError):
        result.wait()
    handle = ops.register_handle(ops.AsyncResult([_Fake(ValueError("refused"))], lambda hs: 1))
    with pytest.raises(InvalidCollectiveError):
        ops.synchronize_handle(handle)
    assert ops.synchronize_handle(handle) is None  # released either way
    with pytest.raises(ValueError, match="was not created or has been cleared"):
        ops.poll_handle(handle)


def test_timeout() -> None:
    with pytest.raises(HoraTimeoutError):
        ops.wait_all([_Fake(finishes=False)], timeout=0.01)


def test_gradient_arithmetic() -> None:
    assert gradients.reducescatter_grad_factors(ops.Average, 2.0, 3.0, 4) == [2.0, 3.0]
    assert gradients.reducescatter_grad_factors(ops.Sum, 2.0, 3.0, 4) == [4.0, 2.0, 3.0]
    assert gradients.reducescatter_grad_factors(ops.Average, 1.0, 1.0, 4) == []
    ints = gradients.scale_array(np.array([3, 5], np.int32), 0.5)
    assert ints.dtype == np.int32 and ints.tolist() == [1, 2]
    floats = gradients.scale_array(np.array([3.0], np.float16), 0.5)
    assert floats.dtype == np.float16 and floats.tolist() == [1.5]
    gradients.check_differentiable(ops.Sum, "allreduce")
    with pytest.raises(NotImplementedError, match="only defined for Average and Sum"):
        gradients.check_differentiable(ops.Max, "allreduce")


def test_compression_base_with_cast_hooks() -> None:
    fp16, _, compression = make_compression(
        np.dtype(np.float16), None, dtype_of=lambda t: t.dtype,
        is_floating=lambda d: d.kind == "f", cast=lambda t, d: t.astype(d))
    assert compression.none is NoneCompressor and compression.fp16 is fp16
    assert not hasattr(compression, "bf16")
    x = np.arange(4, dtype=np.float32)
    wire, ctx = compression.fp16.compress(x)
    assert wire.dtype == np.float16
    assert compression.fp16.decompress(wire, ctx).dtype == np.float32
    ints = np.arange(3, dtype=np.int64)
    wire, ctx = fp16.compress(ints)
    assert wire is ints and fp16.decompress(wire, ctx) is ints


def test_export_list_is_shared() -> None:
    import hora

    assert set(api.__all__) <= set(hora.__all__)
    for name in hora.__all__:
        assert hasattr(hora, name), name
    try:
        import hora.torch as hvd
    except ImportError:
        return
    assert set(api.__all__) <= set(hvd.__all__)
    for name in hvd.__all__:
        assert hasattr(hvd, name), name


def test_torch_cpu_tensors_cross_as_capsules() -> None:
    import torch
    import torch.utils.dlpack
    from hora.torch import _async_ops

    tensor = torch.arange(6, dtype=torch.float32)
    capsule = _async_ops._engine_form(tensor)
    assert type(capsule).__name__ == "PyCapsule"
    torch.utils.dlpack.from_dlpack(capsule)[0] = 42.0  # the capsule shares the tensor's memory
    assert tensor[0].item() == 42.0
    # A tensor the frontend would not hand over as it is takes the generic path, whose
    # __dlpack__ refuses it with torch's own message.
    needs_grad = torch.ones(2, requires_grad=True)
    assert _async_ops._engine_form(needs_grad) is needs_grad
