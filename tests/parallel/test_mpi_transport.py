"""The MPI transport under ``mpirun`` (no horarun): transport choice, topology from MPI,
re-init after shutdown, ``init(comm=...)`` with an mpi4py communicator or a list of ranks,
negotiation and collectives on different transports (MPI beside TCP), and the application's own
MPI traffic running beside Hora's.

Run as ``mpirun -np N python -m pytest tests/parallel/test_mpi_transport.py`` (as root add
``--allow-run-as-root``; more ranks than cores need ``--oversubscribe``). Skipped as a whole, on
every rank alike, when not started by an MPI launcher or when this build has no MPI. The tests
that need mpi4py skip on every rank alike when it is not installed.
"""

from __future__ import annotations

import os

import hora
import numpy as np
import pytest
from conftest import all_inputs, assert_same, rank, reduce_ref, size
from hora.runner import rank_discovery

pytestmark = pytest.mark.skipif(
    not (rank_discovery.under_mpirun() and hora.mpi_built()),
    reason="needs an MPI build of Hora started by mpirun",
)


def _world_rank() -> int:
    return int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"])


def _world_size() -> int:
    return int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ["PMI_SIZE"])


def _sum_check(tag: str, ranks: list[int] | None = None) -> None:
    """A float32 and a float16 Sum allreduce over the running job, checked against NumPy.

    ``ranks`` are the MPI_COMM_WORLD ranks of the Hora ranks in Hora rank order (default: the
    world in order); inputs are keyed by world rank so the reference does not depend on order.
    """
    ranks = list(range(_world_size())) if ranks is None else ranks
    me = _world_rank()
    for dtype in ("float32", "float16"):
        xs = all_inputs(101, dtype, "mpi", tag, ranks=ranks)
        out = hora.allreduce(xs[ranks.index(me)], op=hora.Sum, name=f"mpi.{tag}.{dtype}")
        assert_same(out, reduce_ref(xs, "sum", dtype), dtype)


def _restore_world() -> None:
    hora.shutdown()
    hora.init()
    assert hora.size() == _world_size()


@pytest.fixture
def clean_transport_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ("CONTROLLER", "CPU_OPERATIONS"):
        for prefix in ("HORA_", "HOROVOD_"):
            monkeypatch.delenv(prefix + var, raising=False)
    return monkeypatch


def test_runs_on_mpi() -> None:
    """Under mpirun with MPI built, the default transport is MPI and the topology is MPI's."""
    assert hora._core.transport_name() == "mpi"
    assert hora.mpi_enabled() and not hora.gloo_enabled()
    assert (rank(), size()) == (_world_rank(), _world_size())
    local = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
    if local is not None:
        assert hora.local_rank() == int(local)
        assert hora.local_size() == int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"])
    assert hora.local_size() * hora.cross_size() == size()
    assert isinstance(hora.mpi_threads_supported(), bool)
    _sum_check("default")


def test_default_is_mpi_without_variables(clean_transport_env: pytest.MonkeyPatch) -> None:
    """No HORA_CONTROLLER / HORA_CPU_OPERATIONS: mpirun alone selects MPI."""
    _restore_world()
    assert hora._core.transport_name() == "mpi"
    _sum_check("no-vars")


def test_reinit_after_shutdown() -> None:
    """MPI stays initialised across shutdown(); init() works again, several times."""
    for cycle in range(3):
        hora.shutdown()
        assert not hora.is_initialized()
        hora.init()
        assert hora._core.transport_name() == "mpi"
        assert (rank(), size()) == (_world_rank(), _world_size())
        _sum_check(f"reinit{cycle}")


def test_static_process_sets_are_subcommunicators() -> None:
    """Process sets run on MPI sub-communicators (one per set)."""
    if size() < 2:
        pytest.skip("needs 2 ranks")
    n = size()
    hora.shutdown()
    evens = hora.ProcessSet([r for r in range(n) if r % 2 == 0])
    odds = hora.ProcessSet([r for r in range(n) if r % 2 == 1])
    hora.init(process_sets=[evens, odds])
    try:
        mine = evens if rank() % 2 == 0 else odds
        xs = all_inputs(57, "bfloat16", "mpi-sets", ranks=mine.ranks)
        out = hora.allreduce(
            xs[mine.ranks.index(rank())], op=hora.Sum, name="mpi.sets", process_set=mine
        )
        assert_same(out, reduce_ref(xs, "sum", "bfloat16"), "bfloat16")
        hora.barrier()  # the coordinator (rank 0) must not shut down before the other set ran
    finally:
        _restore_world()


def test_init_with_rank_list_reversed() -> None:
    """init(comm=[ranks]) runs Hora on those MPI_COMM_WORLD ranks, numbered in list order."""
    hora.shutdown()
    order = list(range(_world_size()))[::-1]
    hora.init(comm=order)
    try:
        assert hora._core.transport_name() == "mpi"
        assert hora.size() == len(order)
        assert hora.rank() == order.index(_world_rank())
        _sum_check("reversed", ranks=order)
        # Broadcast roots are Hora ranks: root 0 is the last world rank.
        value = np.array([_world_rank()], dtype=np.int64)
        out = hora.broadcast(value, root_rank=0, name="mpi.reversed.bcast")
        assert int(out[0]) == order[0]
    finally:
        _restore_world()


def test_init_with_rank_subset() -> None:
    """Ranks left out of comm=[...] do not run Hora; one that calls init(comm=...) anyway gets
    ValueError (MPI stays initialised, as Open MPI requires of every process)."""
    if _world_size() < 3:
        pytest.skip("needs 3 ranks")
    members = [0, _world_size() - 1]
    hora.shutdown()
    if _world_rank() in members:
        hora.init(comm=members)
        assert (hora.size(), hora.rank()) == (2, members.index(_world_rank()))
        _sum_check("subset", ranks=members)
        hora.barrier()
    else:
        with pytest.raises(ValueError, match="not in comm"):
            hora.init(comm=members)
        assert not hora.is_initialized()
    _restore_world()
    _sum_check("after-subset")


def test_init_comm_type_is_checked() -> None:
    hora.shutdown()
    try:
        with pytest.raises(TypeError):
            hora.init(comm="world")
        with pytest.raises(ValueError):
            hora.init(comm=[0, "1"])
    finally:
        _restore_world()


@pytest.mark.parametrize("controller,cpu", [("mpi", "gloo"), ("tcp", "mpi")])
def test_mixed_transports(clean_transport_env: pytest.MonkeyPatch, controller: str, cpu: str) -> None:
    """Negotiation on one transport and collectives on the other, under mpirun alone: the TCP
    store is bootstrapped over MPI. Also on a reordered rank list (a communicator of its own)."""
    label = f"{controller}+{'tcp' if cpu == 'gloo' else cpu}"
    hora.shutdown()
    clean_transport_env.setenv("HORA_CONTROLLER", controller)
    clean_transport_env.setenv("HOROVOD_CPU_OPERATIONS", cpu)
    try:
        hora.init()
        assert hora._core.transport_name() == label
        assert hora.mpi_enabled() and hora.gloo_enabled()
        assert isinstance(hora.mpi_threads_supported(), bool)
        assert (rank(), size()) == (_world_rank(), _world_size())
        _sum_check(label)
        hora.shutdown()
        order = list(range(_world_size()))[::-1]
        hora.init(comm=order)
        assert hora._core.transport_name() == label
        assert hora.rank() == order.index(_world_rank())
        _sum_check(label + "-reversed", ranks=order)
    finally:
        clean_transport_env.undo()
        _restore_world()
    assert hora._core.transport_name() == "mpi"


def test_init_with_mpi4py_communicator() -> None:
    """init(comm=an mpi4py communicator): Hora runs on that communicator (here: halves of the
    world, each its own Hora job), and on COMM_WORLD itself."""
    mpi4py = pytest.importorskip("mpi4py.MPI")
    world = mpi4py.COMM_WORLD
    hora.shutdown()
    half = world.Split(color=_world_rank() % 2, key=_world_rank())
    try:
        hora.init(comm=half)
        assert hora._core.transport_name() == "mpi"
        assert (hora.size(), hora.rank()) == (half.Get_size(), half.Get_rank())
        members = [r for r in range(_world_size()) if r % 2 == _world_rank() % 2]
        _sum_check("half", ranks=members)
        hora.shutdown()
        hora.init(comm=world)
        assert (hora.size(), hora.rank()) == (world.Get_size(), world.Get_rank())
        _sum_check("comm-world")
    finally:
        hora.shutdown()
        half.Free()
        hora.init()


def test_application_mpi_traffic_does_not_mix() -> None:
    """The application's own messages on COMM_WORLD (any tag, any source) never meet Hora's,
    which travel on Hora's private communicators."""
    mpi4py = pytest.importorskip("mpi4py.MPI")
    if not hora.mpi_threads_supported():
        pytest.skip("MPI runs below MPI_THREAD_MULTIPLE")
    world = mpi4py.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    xs = all_inputs(4099, "float32", "mpi-mix")
    handles = [
        hora.allreduce_async(xs[me].copy(), op=hora.Sum, name=f"mpi.mix.{i}") for i in range(4)
    ]
    for tag in (0, 1, 7):
        got = world.sendrecv(("app", me, tag), dest=(me + 1) % n, sendtag=tag,
                             source=mpi4py.ANY_SOURCE, recvtag=mpi4py.ANY_TAG)
        assert got == ("app", (me - 1) % n, tag)
    assert world.allreduce(me) == n * (n - 1) // 2
    expected = reduce_ref(xs, "sum", "float32")
    for h in handles:
        assert_same(hora.synchronize(h), expected, "float32")
