"""Shared fixtures and NumPy references for the multi-rank core tests.

These tests run under ``horarun -np N python -m pytest ...``: every rank collects the same tests in
the same order and runs them in lockstep. A test may therefore only be skipped when the decision is
the same on every rank (for example ``hora.size() == 1``); skipping on some ranks only would leave
the others waiting in a collective.

Every rank derives every rank's input deterministically from the rank and the test's parameters,
so each rank can compute the expected result of a collective locally with NumPy.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import time
import zlib
from collections.abc import Iterator, Sequence

import ml_dtypes
import numpy as np
import pytest

# Dynamic process sets are exercised by test_core_misc.py; they must be enabled before init.
os.environ.setdefault("HORA_DYNAMIC_PROCESS_SETS", "1")

import hora
from hora.common.process_sets import process_sets

# A test that hangs (a collective some rank never joins) dumps its stack and exits the rank, so the
# launcher ends the job instead of the run waiting for ever.
TEST_TIMEOUT_SECONDS = float(os.environ.get("HORA_TEST_TIMEOUT", "180"))

BF16 = np.dtype(ml_dtypes.bfloat16)

DTYPES: list[str] = [
    "uint8",
    "int8",
    "uint16",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "bool",
]
INT_DTYPES: list[str] = ["uint8", "int8", "uint16", "int16", "int32", "int64"]
FLOAT_DTYPES: list[str] = ["float16", "bfloat16", "float32", "float64"]

# Element counts: empty, one, odd, not divisible by any rank count 2..4, and "big" (resolved per
# dtype by big_count() to more bytes than the fusion threshold when that threshold is small).
SIZES: list[int | str] = [0, 1, 17, 1001, "big"]

OPS: dict[str, int] = {
    "average": hora.Average,
    "sum": hora.Sum,
    "min": hora.Min,
    "max": hora.Max,
    "product": hora.Product,
}

# Relative tolerance for results that involve one rounding step beyond exact arithmetic.
RTOL: dict[str, float] = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}


def hora_mappings(bound_seconds: float = 5.0) -> list[str]:
    """The lines of /proc/self/maps that map Hora's shared memory (memfd "hora-shm"), looked at
    until none is left or ``bound_seconds`` pass, collecting garbage before each look: after a
    shutdown they must go, and a framework may drop its last reference to a tensor held there on
    one of its own threads a moment after the call that used it returned."""
    deadline = time.monotonic() + bound_seconds
    while True:
        gc.collect()
        with open("/proc/self/maps", encoding="utf-8") as maps:
            left = [line.rstrip() for line in maps if "hora-shm" in line]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session", autouse=True)
def hora_session() -> Iterator[None]:
    """Initialise Hora once for the whole session and shut it down at the end."""
    hora.init()
    yield
    hora.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _module_process_sets() -> Iterator[None]:
    """Remove the process sets a test file added (a torch.distributed ``new_group`` leaves its
    set registered), so that the next file of the session starts with the sets it would have
    started with alone. Collective: every rank runs the same files in the same order."""
    before = {ps.process_set_id for ps in process_sets()} if hora.is_initialized() else set()
    yield
    if not hora.is_initialized():
        return
    for ps in process_sets():
        if ps.process_set_id not in before:
            hora.remove_process_set(ps)


@pytest.fixture(autouse=True)
def _hang_watchdog() -> Iterator[None]:
    """Turn a hung test into a failed rank with a stack dump."""
    faulthandler.dump_traceback_later(TEST_TIMEOUT_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# --------------------------------------------------------------------------------------------
# Topology and sizes


def rank() -> int:
    """This process's world rank."""
    return hora.rank()


def size() -> int:
    """Number of ranks in the job."""
    return hora.size()


def agrees_locally() -> bool:
    """Whether cached tensors of the global set are agreed on without rank 0
    (core/coordinator/local_agreement.h): one rank alone, or every rank on this host over shared
    memory (the transport ``tcp+shm``: under MPI there is no agreement board), with the response
    cache and local agreement on and autotune off."""
    env = os.environ.get
    if size() > 1 and (hora.local_size() != size() or hora._core.transport_name() != "tcp+shm"):
        return False
    if env("HORA_SHM_DISABLE", "0") != "0" or env("HORA_CACHE_CAPACITY", "1") == "0":
        return False
    return env("HORA_SHM_LOCAL_AGREEMENT", "1") != "0" and env("HORA_AUTOTUNE", "0") == "0"


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return n > 0 and n & (n - 1) == 0


def fusion_threshold() -> int:
    """The fusion threshold in bytes the engine was started with (same env on every rank)."""
    for var in ("HORA_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"):
        value = os.environ.get(var)
        if value:
            return int(value)
    return 128 * 1024 * 1024


def big_count(dtype: str) -> int:
    """An element count whose byte size exceeds the fusion threshold when that is small.

    With the default threshold (128 MiB) exceeding it would make the suite slow, so a count of
    70001 elements is used instead; run_all.sh runs the suite with a 64 KiB threshold as well.
    """
    threshold = fusion_threshold()
    itemsize = np_dtype(dtype).itemsize
    if 0 < threshold <= 8 * 1024 * 1024:
        return threshold // itemsize + 3
    return 70001


def resolve_count(count: int | str, dtype: str) -> int:
    """Map a SIZES entry to an element count."""
    return big_count(dtype) if count == "big" else int(count)


# --------------------------------------------------------------------------------------------
# Dtypes and inputs


def np_dtype(name: str) -> np.dtype:
    """NumPy dtype for a Hora dtype name (bfloat16 comes from ml_dtypes)."""
    return BF16 if name == "bfloat16" else np.dtype(name)


def seed_of(*parts: object) -> int:
    """A seed that is the same in every process for the same parts (unlike hash())."""
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def rank_rng(rank_: int, *key: object) -> np.random.Generator:
    """Random generator for one rank's data in one test."""
    return np.random.default_rng(seed_of("rank", rank_, *key))


def make_input(
    rank_: int, shape: Sequence[int] | int, dtype: str, *key: object, kind: str = "sum"
) -> np.ndarray:
    """Deterministic input of ``rank_`` for the test identified by ``key``.

    kind:
      "sum"     values whose sum over up to 4 ranks, even scaled by 2, neither overflows nor (for
                floats, which get multiples of 0.5 in [-8, 8]) needs rounding in any dtype;
      "product" small values whose product over 4 ranks is exact ([-3, 3] or [0, 3]; floats from
                {+-0.5, +-1, +-1.5, +-2});
      "any"     the full range of integer dtypes, normal floats (for min/max, copies, gathers);
      "normal"  standard normal values (floats only; results compared with a tolerance).
    """
    rng = rank_rng(rank_, dtype, kind, *key)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dt = np_dtype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype in INT_DTYPES:
        info = np.iinfo(dt)
        if kind == "any":
            return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        if kind == "product":
            low = 0 if info.min == 0 else -3
            return rng.integers(low, 3, size=shape, endpoint=True).astype(dt)
        bound = info.max // 16
        low = 0 if info.min == 0 else -bound
        return rng.integers(low, bound, size=shape, dtype=dt, endpoint=True)
    if kind == "product":
        choices = np.array([-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0])
        return rng.choice(choices, size=shape).astype(dt)
    if kind in ("any", "normal"):
        scale = 10.0 if kind == "any" else 1.0
        return (rng.standard_normal(size=shape) * scale).astype(dt)
    return (rng.integers(-16, 16, size=shape, endpoint=True) / 2.0).astype(dt)


def all_inputs(
    shape: Sequence[int] | int,
    dtype: str,
    *key: object,
    kind: str = "sum",
    ranks: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """Every rank's input (or those of ``ranks``), in rank order."""
    ranks = range(size()) if ranks is None else ranks
    return [make_input(r, shape, dtype, *key, kind=kind) for r in ranks]


def kind_for_op(op: str) -> str:
    """Input kind that keeps the reference of ``op`` exact."""
    return {"product": "product", "min": "any", "max": "any"}.get(op, "sum")


# --------------------------------------------------------------------------------------------
# References


NARROW_INT_DTYPES: list[str] = ["uint8", "int8", "uint16", "int16"]


def scale_ref(x: np.ndarray, factor: float, dtype: str) -> np.ndarray:
    """Element-wise scaling as Horovod's CPU code does it: float64 and float32 multiply by the
    factor rounded to their own type, float16 and bfloat16 multiply in float32 by the factor
    rounded to float32, integers multiply in float64 and truncate toward zero."""
    if factor == 1.0:
        return x.copy()
    if dtype == "bool":
        return x.copy() if factor != 0.0 else np.zeros_like(x)
    dt = np_dtype(dtype)
    if dtype in INT_DTYPES:
        return np.trunc(x.astype(np.float64) * factor).astype(dt)
    if dtype in ("float16", "bfloat16"):
        return (x.astype(np.float32) * np.float32(factor)).astype(dt)
    return x * dt.type(factor)


def reduce_ref(
    arrays: Sequence[np.ndarray], op: str, dtype: str, prescale: float = 1.0, postscale: float = 1.0
) -> np.ndarray:
    """NumPy reference of allreduce over ``arrays`` (one per contributing rank).

    Average is Sum followed by a multiplication by postscale/len(arrays) (integers truncated toward
    zero; 8- and 16-bit integers are summed without wrapping before that). Bool: Sum, Max and
    Average are logical OR, Min and Product logical AND.
    """
    dt = np_dtype(dtype)
    n = len(arrays)
    xs = [scale_ref(a, prescale, dtype) for a in arrays]
    stacked = np.stack(xs)
    base = "sum" if op == "average" else op
    if dtype == "bool":
        if base in ("sum", "max"):
            out = np.logical_or.reduce(stacked, axis=0)
        else:
            out = np.logical_and.reduce(stacked, axis=0)
    elif op == "average" and dtype in NARROW_INT_DTYPES:
        total = np.sum(stacked.astype(np.int64), axis=0)
        wide = truncating_division(total, n) if postscale == 1.0 else np.trunc(total * (postscale / n))
        info = np.iinfo(dt)
        return np.clip(wide, info.min, info.max).astype(dt)
    elif dtype in INT_DTYPES:
        funcs = {"sum": np.sum, "product": np.prod, "min": np.min, "max": np.max}
        out = funcs[base](stacked, axis=0).astype(dt)
    else:
        wide = stacked.astype(np.float64)
        funcs = {"sum": np.sum, "product": np.prod, "min": np.min, "max": np.max}
        out = funcs[base](wide, axis=0).astype(dt)
    if op == "average" and postscale == 1.0 and dtype != "bool":
        # A plain Average divides: exactly (truncating) for integers, correctly rounded in the
        # type for floats (in float32 for float16 and bfloat16).
        if dtype in INT_DTYPES:
            return truncating_division(out.astype(np.int64), n).astype(dt)
        if dtype in ("float16", "bfloat16"):
            return (out.astype(np.float32) / np.float32(n)).astype(dt)
        return out / dt.type(n)
    factor = postscale / n if op == "average" else postscale
    return scale_ref(out, factor, dtype)


def truncating_division(x: np.ndarray, n: int) -> np.ndarray:
    """x / n for integers, truncated toward zero (as C and Horovod's tests do; // floors)."""
    return np.sign(x) * (np.abs(x) // n)


def adasum_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Adasum of two float64 vectors: (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b."""
    dot = float(np.dot(a, b))
    anorm = float(np.dot(a, a))
    bnorm = float(np.dot(b, b))
    acoeff = 1.0 - dot / (2.0 * anorm) if anorm > 0.0 else 1.0
    bcoeff = 1.0 - dot / (2.0 * bnorm) if bnorm > 0.0 else 1.0
    return acoeff * a + bcoeff * b


def adasum_ref(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Adasum over a power-of-two number of ranks, paired as vector-halving distance-doubling does.

    At level k rank r combines with rank r ^ 2**k; after the last level every rank holds the same
    vector. One rank: the identity.
    """
    n = len(arrays)
    assert is_power_of_two(n)
    shape = arrays[0].shape
    vecs = [a.astype(np.float64).ravel() for a in arrays]
    distance = 1
    while distance < n:
        nxt = list(vecs)
        for r in range(n):
            peer = r ^ distance
            low, high = (r, peer) if r < peer else (peer, r)
            nxt[r] = adasum_pair(vecs[low], vecs[high])
        vecs = nxt
        distance *= 2
    return vecs[0].reshape(shape)


def reducescatter_rows(dim0: int, nranks: int) -> list[int]:
    """Rows of the result on each rank: the first dim0 % n ranks get one extra row."""
    base, extra = divmod(dim0, nranks)
    return [base + (1 if r < extra else 0) for r in range(nranks)]


# --------------------------------------------------------------------------------------------
# Comparisons


def assert_same(actual: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    """Exact comparison, including dtype and shape."""
    actual = np.asarray(actual)
    assert actual.dtype == np_dtype(dtype), f"dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if actual.size == 0:
        return
    if dtype in FLOAT_DTYPES:
        a64 = actual.astype(np.float64)
        e64 = expected.astype(np.float64)
        bad = ~((a64 == e64) | (np.isnan(a64) & np.isnan(e64)))
    else:
        bad = actual != expected
    if bad.any():
        idx = np.flatnonzero(bad.ravel())
        first = idx[:5]
        raise AssertionError(
            f"{idx.size} of {actual.size} elements differ; first at {first.tolist()}: "
            f"got {actual.ravel()[first].tolist()}, expected {expected.ravel()[first].tolist()}"
        )


def assert_close(
    actual: np.ndarray,
    expected: np.ndarray,
    dtype: str,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Comparison with a tolerance for floats (exact for integers and bool)."""
    actual = np.asarray(actual)
    if dtype not in FLOAT_DTYPES:
        assert_same(actual, expected, dtype)
        return
    assert actual.dtype == np_dtype(dtype), f"dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    rtol = RTOL[dtype] if rtol is None else rtol
    atol = rtol if atol is None else atol
    np.testing.assert_allclose(
        actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol
    )


def check_next_op_works(tag: str) -> None:
    """A plain Sum allreduce that must succeed (used after an error to show the job is healthy)."""
    xs = all_inputs(33, "float32", "next-op", tag)
    out = hora.allreduce(xs[rank()], op=hora.Sum, name=f"next_op.{tag}")
    assert_same(out, reduce_ref(xs, "sum", "float32"), "float32")
