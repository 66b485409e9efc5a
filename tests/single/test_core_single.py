"""One process, rank 0 of 1: lifecycle, every op on every dtype, and the error paths of the
bindings and the hora package."""

import gc
import socket
import sys
import warnings

import hora
import ml_dtypes
import numpy as np
import pytest
from hora import _core
from hora.common import ops
from hora.common.process_sets import ProcessSet

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
               "PMI_SIZE")
TOPOLOGY_VARS = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE",
                 "RENDEZVOUS_ADDR", "RENDEZVOUS_PORT", "SECRET", "CYCLE_TIME",
                 "DYNAMIC_PROCESS_SETS", "START_TIMEOUT")

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32,
          np.float64, np.bool_, ml_dtypes.bfloat16]
FLOATS = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16]
SHAPES = [(0,), (1,), (17,), (3, 5), (4, 0, 2)]


@pytest.fixture(autouse=True)
def alone(monkeypatch):
    """Every test starts without launcher variables and with Hora shut down."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in TOPOLOGY_VARS:
        monkeypatch.delenv("HORA_" + name, raising=False)
        monkeypatch.delenv("HOROVOD_" + name, raising=False)
    hora.shutdown()
    yield
    hora.shutdown()


@pytest.fixture
def started():
    hora.init()
    yield


def sample(dtype, shape):
    n = int(np.prod(shape))
    values = np.arange(n) % 7
    return values.astype(dtype).reshape(shape)


def same(result, expected):
    assert result.dtype == expected.dtype
    assert result.shape == expected.shape
    np.testing.assert_array_equal(result.astype(np.float64), expected.astype(np.float64))


# ------------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("getter", [hora.rank, hora.size, hora.local_rank, hora.local_size,
                                    hora.cross_rank, hora.cross_size, hora.is_homogeneous])
def test_getters_raise_before_init(getter):
    with pytest.raises(ValueError, match="not been initialized"):
        getter()


def test_init_alone_and_reinit():
    assert not hora.is_initialized()
    hora.init()
    assert hora.is_initialized()
    assert (hora.rank(), hora.size(), hora.local_rank(), hora.local_size()) == (0, 1, 0, 1)
    assert (hora.cross_rank(), hora.cross_size(), hora.is_homogeneous()) == (0, 1, True)
    hora.init()  # no-op while initialized
    hora.shutdown()
    hora.shutdown()  # idempotent
    assert not hora.is_initialized()
    hora.init()
    same(hora.allreduce(np.ones(3), op=hora.Sum), np.ones(3))
    assert hora.global_process_set.ranks == [0]


def test_build_queries(started):
    assert hora.gloo_built() and hora.gloo_enabled() and not hora.mpi_enabled()
    assert isinstance(hora.mpi_built(), bool)
    assert hora.nccl_built() == 0 and not hora.cuda_built()
    assert not (hora.ddl_built() or hora.ccl_built() or hora.rocm_built())
    with pytest.raises(ValueError):
        hora.mpi_threads_supported()
    assert _core.transport_name() == "tcp"
    assert isinstance(_core.version, str) and hora.__version__ == _core.version


def test_env_table_and_lookup(monkeypatch):
    names = {entry[0] for entry in _core.env_vars()}
    assert {"FUSION_THRESHOLD", "CYCLE_TIME", "RANK", "SECRET"} <= names
    # Negotiation moves to shared memory with the collectives unless a rank says no (docs/concepts.md).
    assert {entry[0]: entry[1] for entry in _core.env_vars()}["SHM_CONTROL"] == "1"
    # Waits stop polling while it keeps failing them, unless HORA_SPIN_ADAPTIVE=0 (docs/tuning.md).
    assert {entry[0]: entry[1] for entry in _core.env_vars()}["SPIN_ADAPTIVE"] == "1"
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "5")
    assert _core.lookup_env("FUSION_THRESHOLD") == "5"
    monkeypatch.setenv("HORA_FUSION_THRESHOLD", "7")
    assert _core.lookup_env("FUSION_THRESHOLD") == "7"
    monkeypatch.delenv("HORA_FUSION_THRESHOLD")
    monkeypatch.delenv("HOROVOD_FUSION_THRESHOLD")
    assert _core.lookup_env("FUSION_THRESHOLD") is None
    with pytest.raises(ValueError):
        _core.lookup_env("NO_SUCH_SETTING")


@pytest.mark.parametrize("value", ["100", "-128", "2147483648"])
def test_bad_shm_window_size_is_refused_at_init(monkeypatch, value):
    """HORA_SHM_WINDOW_BYTES must be a multiple of 128 from 0 to 1 GiB (docs/tuning.md)."""
    assert {entry[0]: entry[1] for entry in _core.env_vars()}["SHM_WINDOW_BYTES"] == "524288"
    monkeypatch.setenv("HORA_SHM_WINDOW_BYTES", value)
    with pytest.raises(ValueError, match="HORA_SHM_WINDOW_BYTES must be a multiple of 128"):
        hora.init()
    monkeypatch.setenv("HORA_SHM_WINDOW_BYTES", "0")
    hora.init()


# ------------------------------------------------------------------------ every op, every dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_allreduce_every_dtype(started, dtype, shape):
    x = sample(dtype, shape)
    ops_to_try = [hora.Sum, hora.Min, hora.Max, hora.Product]
    if dtype is not np.bool_:
        ops_to_try.append(hora.Average)
    for op in ops_to_try:
        same(hora.allreduce(x, op=op), x)
    y = x.copy()
    assert hora.allreduce_(y, op=hora.Sum) is y
    same(y, x)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_allreduce_scale_factors_and_adasum(started, dtype):
    x = sample(dtype, (9,))
    out = hora.allreduce(x, op=hora.Sum, prescale_factor=2.0, postscale_factor=1.5)
    same(out, (x.astype(np.float64) * 3.0).astype(dtype))
    same(hora.allreduce(x, op=hora.Adasum), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_allgather_broadcast_alltoall_reducescatter(started, dtype, shape):
    x = sample(dtype, shape)
    same(hora.allgather(x), x)
    same(hora.broadcast(x, 0), x)
    y = x.copy()
    assert hora.broadcast_(y, 0) is y
    same(hora.alltoall(x), x)
    out, received = hora.alltoall(x, splits=[shape[0]])
    same(out, x)
    assert received.tolist() == [shape[0]]
    if dtype is not np.bool_:
        same(hora.reducescatter(x), x)
        same(hora.reducescatter(x, op=hora.Sum), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_grouped_ops(started, dtype):
    xs = [sample(dtype, s) for s in [(3,), (2, 2), (0,)]]
    for got, want in zip(hora.grouped_allreduce(xs, op=hora.Sum), xs):
        same(got, want)
    for got, want in zip(hora.grouped_allgather(xs), xs):
        same(got, want)
    if dtype is not np.bool_:
        for got, want in zip(hora.grouped_reducescatter(xs, op=hora.Sum), xs):
            same(got, want)
    ys = [x.copy() for x in xs]
    assert all(a is b for a, b in zip(hora.grouped_allreduce_(ys, op=hora.Max), ys))


def test_large_tensor_and_scalar_allreduce(started):
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    same(hora.allreduce(x, op=hora.Sum), x)
    same(hora.allreduce(np.float64(2.5)), np.array(2.5))


def test_async_poll_synchronize_and_names(started):
    handle = hora.allreduce_async(np.ones(4), name="grad")
    result = hora.synchronize(handle)
    assert hora.poll(handle)
    same(result, np.ones(4))
    grouped = hora.grouped_allreduce_async([np.ones(2), np.zeros(3)], name="g", op=hora.Sum)
    assert [r.shape for r in hora.synchronize(grouped)] == [(2,), (3,)]
    assert ops.group_names("grouped_allreduce", "g", 2) == [
        "grouped_allreduce.g_1of2", "grouped_allreduce.g_2of2"]
    assert ops.op_name("allreduce", "x") == "allreduce.x"
    assert ops.auto_name("unit").startswith("unit.noname.")
    assert hora.synchronize(object()) is None


def test_output_is_zero_copy_and_writable(started):
    handle = ops.enqueue("allgather", [np.arange(5, dtype=np.int32)], names=["allgather.zc"])[0]
    assert handle.wait() is True
    first = handle.output()
    second = handle.output()
    first[0] = 42
    assert second[0] == 42 and first.flags.writeable
    assert handle.received_splits() == []
    in_place = ops.enqueue("allreduce", [np.ones(2)], names=["allreduce.in_place"])[0]
    in_place.wait()
    assert in_place.output() is None


def test_join_barrier_and_objects(started):
    assert hora.join() == 0
    hora.barrier()
    payload = {"lr": 0.1, "layers": [1, 2, 3]}
    assert hora.broadcast_object(payload) == payload
    assert hora.allgather_object(payload) == [payload]
    assert hora.broadcast_object(lambda v: v + 1, name="fn")(1) == 2


def test_process_sets_static_and_duplicates():
    with pytest.raises(ValueError):
        hora.init(process_sets=[ProcessSet([0]), [0]])
    assert not hora.is_initialized()
    world = ProcessSet([0])
    hora.init(process_sets=[world])
    assert world.process_set_id == 0 and world.size() == 1 and world.rank() == 0
    assert world.included()
    same(hora.allreduce(np.ones(2), op=hora.Sum, process_set=world), np.ones(2))
    assert hora.remove_process_set(hora.global_process_set) is False
    # Horovod's text, which scripts (and Horovod's own tests) compare.
    assert str(world) == "ProcessSet(process_set_id=0, ranks=[0], mpi_comm=None)"


# --------------------------------------------------------------------------------- errors


def test_non_contiguous_in_place_is_rejected(started):
    x = np.zeros((4, 4))[:, ::2]
    with pytest.raises(ValueError, match="tensor must be contiguous"):
        hora.allreduce_(x)
    same(hora.allreduce(x), np.zeros((4, 2)))  # out-of-place copies into a contiguous array
    column = np.zeros((4, 1))[::1, :]  # size-1 dimensions may have any stride
    hora.allreduce_(np.lib.stride_tricks.as_strided(column, strides=(8, 800)))


@pytest.mark.parametrize("dtype", [np.complex64, np.uint32, np.uint64])
def test_unsupported_dtype(started, dtype):
    with pytest.raises(ValueError, match=r"Tensor type \w+ is not supported\."):
        hora.allreduce(np.zeros(3, dtype=dtype))


def test_duplicate_in_flight_name(started):
    x, y = np.ones(3), np.ones(3)
    with pytest.raises(ValueError, match="same name"):
        ops.enqueue("allreduce", [x, y], names=["allreduce.dup", "allreduce.dup"])
    same(hora.allreduce_(x, name="dup"), np.ones(3))  # nothing was queued: the name is free
    same(hora.allreduce_(y, name="dup"), np.ones(3))  # and free again once finished


def test_dropped_handle_keeps_buffer_until_done(started):
    x = np.ones(1 << 16)
    baseline = sys.getrefcount(x)
    handle = ops.enqueue("allreduce", [x], names=["allreduce.dropped"], op=hora.Sum)[0]
    assert sys.getrefcount(x) > baseline  # the DLPack export holds the array
    del handle  # possibly still running: the input moves to the deferred list
    gc.collect()
    hora.barrier()  # the dropped allreduce finished before the barrier; waiting sweeps
    ops.enqueue("barrier", [], names=["barrier.sweep"])[0].wait()
    assert sys.getrefcount(x) == baseline
    same(x, np.ones(1 << 16))


def test_enqueue_checks(started):
    x = np.arange(4.0)
    with pytest.raises(ValueError, match="invalid root rank 3 for provided process set"):
        hora.broadcast(x, 3)
    with pytest.raises(ValueError, match="only supports AVERAGE and SUM") as err:
        hora.reducescatter(x, op=hora.Min)
    assert isinstance(err.value, hora.HoraError)
    with pytest.raises(ValueError, match="Number of entries in splits"):
        hora.alltoall(x, splits=[2, 2])
    with pytest.raises(ValueError, match="Sum of splits"):
        hora.alltoall(x, splits=[5])
    with pytest.raises(ValueError, match="1-D"):
        hora.alltoall(x, splits=[[4]])
    with pytest.raises(ValueError, match="at least one dimension"):
        hora.allgather(np.float32(1))
    unknown = ProcessSet([1])  # a member's refusal needs two ranks: parallel/test_core_misc.py
    unknown.process_set_id = 7
    with pytest.raises(ValueError, match=r"the process set \(id 7\) .* is not registered"):
        hora.allreduce(x, process_set=unknown)
    with pytest.raises(ValueError, match="not registered"):
        hora.allreduce(x, process_set=ProcessSet([0]))
    with pytest.raises(TypeError):
        ops.enqueue("allreduce", ["not a tensor"], names=["allreduce.bad"])


def test_average_compatibility(started):
    with pytest.warns(DeprecationWarning):
        same(hora.allreduce(np.ones(2), average=True), np.ones(2))
    with pytest.raises(ValueError, match="supersedes"):
        hora.allreduce(np.ones(2), average=True, op=hora.Sum)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hora.allreduce(np.ones(2))


def test_split_errors_are_both_value_and_runtime_errors(started):
    """Bad alltoall splits raise InvalidCollectiveError: the ValueError Horovod's torch raises and
    the RuntimeError (HorovodInternalError) its MXNet and TensorFlow frontends raise."""
    x = np.arange(4.0)
    for splits, message in (([2, 2], "Number of entries in splits"), ([5], "Sum of splits")):
        with pytest.raises(hora.InvalidCollectiveError, match=message) as err:
            hora.alltoall(x, splits=splits)
        assert isinstance(err.value, ValueError) and isinstance(err.value, RuntimeError)


def test_raw_capsules_and_request_shape(started):
    x = np.arange(3, dtype=np.float32)
    capsule = x.__dlpack__()
    handle = ops.enqueue("allreduce", [capsule], names=["allreduce.capsule"])[0]
    handle.wait()
    with pytest.raises(ValueError, match="already consumed"):
        ops.enqueue("allreduce", [capsule], names=["allreduce.capsule2"])
    with pytest.raises(ValueError, match="names"):
        ops.enqueue("allreduce", [np.zeros(2)], names=["a", "b"])
    with pytest.raises(ValueError, match="unknown operation kind"):
        _core.submit(42, [np.zeros(2)], ["a"])
    readonly = np.zeros(2)
    readonly.flags.writeable = False
    with pytest.raises(ValueError):
        hora.allreduce_(readonly)


def test_enqueue_before_init_and_error_classes():
    with pytest.raises(ValueError, match="not been initialized"):
        ops.enqueue("allreduce", [np.zeros(2)], names=["allreduce.early"])
    assert issubclass(hora.HoraError, RuntimeError)
    assert hora.HorovodInternalError is hora.HoraError
    for cls in (hora.InternalError, hora.MismatchError, hora.TransportError,
                hora.HoraTimeoutError, hora.NotSupportedError, hora.ShutdownError):
        assert issubclass(cls, hora.HoraError)
    with pytest.raises(ValueError):
        _core.init(0, 1, 0, 1, 0, 1, transport="no-such-transport")
    if not _core.mpi_built():
        with pytest.raises(hora.NotSupportedError):
            _core.init(0, 1, 0, 1, 0, 1, transport="mpi")
    assert not _core.is_initialized()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rendezvous_timeout_when_peers_never_come(monkeypatch):
    monkeypatch.setenv("HORA_START_TIMEOUT", "1")
    with pytest.raises((hora.HoraTimeoutError, hora.TransportError)):
        _core.init(0, 2, 0, 2, 0, 1, store_host="127.0.0.1", store_port=free_port(),
                   serve_store=True, secret="x")
    assert not _core.is_initialized()


def test_store_server():
    server = _core.StoreServer("127.0.0.1", 0, "secret")
    assert server.port > 0
    server.stop()
    server.stop()
    with pytest.raises(ValueError):
        _ = server.port
