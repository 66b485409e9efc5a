"""Which transport hora.init() picks (HORA_CONTROLLER / HORA_CPU_OPERATIONS, mpirun), without
starting the engine; and the comm= argument checks that need no MPI."""

import hora
import pytest
from hora.common.basics import _mpi_comm_argument, _require_mpi_launch
from hora.errors import NotSupportedError
from hora.runner import rank_discovery

MPIRUN = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}


def choose(env, mpi_built=True, comm_given=False):
    return rank_discovery.select_transport(env, mpi_built=mpi_built, comm_given=comm_given)


TCP = ("tcp", "tcp")
MPI = ("mpi", "mpi")


def test_defaults():
    assert choose({}) == TCP
    assert choose(MPIRUN) == MPI
    assert choose({"PMI_RANK": "1", "PMI_SIZE": "4"}) == MPI
    assert choose(MPIRUN, mpi_built=False) == TCP
    assert choose({}, comm_given=True) == MPI


def test_under_mpirun():
    assert rank_discovery.under_mpirun(MPIRUN)
    assert not rank_discovery.under_mpirun({"RANK": "0", "WORLD_SIZE": "2"})


@pytest.mark.parametrize("value", ["tcp", "gloo", "GLOO", " Tcp "])
def test_tcp_and_its_gloo_alias(value):
    assert choose({**MPIRUN, "HORA_CONTROLLER": value}) == TCP
    assert choose({**MPIRUN, "HORA_CPU_OPERATIONS": value}) == TCP


def test_one_variable_sets_both_roles():
    assert choose({"HORA_CONTROLLER": "mpi"}) == MPI
    assert choose({"HORA_CPU_OPERATIONS": "mpi"}) == MPI
    assert choose({"HORA_CONTROLLER": "mpi", "HORA_CPU_OPERATIONS": "MPI"}) == MPI


def test_horovod_names_and_hora_precedence():
    assert choose({"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi"}) == MPI
    assert choose({**MPIRUN, "HOROVOD_CONTROLLER": "gloo"}) == TCP
    assert choose({"HOROVOD_CONTROLLER": "gloo", "HORA_CONTROLLER": "mpi"}) == MPI


@pytest.mark.parametrize("env", [{}, MPIRUN])
def test_mixed_pairs_keep_each_role(env):
    """Negotiation and collectives may run on different transports, in either direction."""
    mpi_tcp = choose({**env, "HORA_CONTROLLER": "mpi", "HORA_CPU_OPERATIONS": "gloo"})
    assert mpi_tcp == ("mpi", "tcp")
    assert (mpi_tcp.controller, mpi_tcp.cpu_operations) == ("mpi", "tcp")
    assert mpi_tcp.uses_mpi and mpi_tcp.uses_tcp
    tcp_mpi = choose({**env, "HOROVOD_CONTROLLER": "tcp", "HOROVOD_CPU_OPERATIONS": "mpi"})
    assert tcp_mpi == ("tcp", "mpi") and tcp_mpi.uses_mpi and tcp_mpi.uses_tcp
    assert choose({**env, "HORA_CONTROLLER": "tcp", "HOROVOD_CPU_OPERATIONS": "mpi"}) == tcp_mpi


def test_one_role_named_the_other_follows():
    # The unset role takes the set one's transport, whatever the default would have been.
    assert choose({**MPIRUN, "HORA_CPU_OPERATIONS": "tcp"}) == TCP
    assert choose({"HORA_CONTROLLER": "mpi"}) == MPI
    assert not choose({}).uses_mpi and not choose(MPIRUN).uses_tcp


def test_comm_with_a_mixed_pair():
    assert choose({"HORA_CONTROLLER": "tcp", "HORA_CPU_OPERATIONS": "mpi"}, comm_given=True) == (
        "tcp", "mpi")
    assert choose({"HORA_CONTROLLER": "mpi", "HORA_CPU_OPERATIONS": "tcp"}, comm_given=True) == (
        "mpi", "tcp")


def test_unknown_transport_is_a_value_error():
    with pytest.raises(ValueError, match="HORA_CONTROLLER='ccl'"):
        choose({"HORA_CONTROLLER": "ccl"})


def test_mpi_without_mpi_build():
    with pytest.raises(NotSupportedError, match="no MPI"):
        choose({"HORA_CONTROLLER": "mpi"}, mpi_built=False)
    with pytest.raises(NotSupportedError, match="no MPI"):
        choose({"HORA_CONTROLLER": "tcp", "HORA_CPU_OPERATIONS": "mpi"}, mpi_built=False)
    with pytest.raises(NotSupportedError, match="no MPI"):
        choose({}, mpi_built=False, comm_given=True)


def test_comm_with_tcp_is_refused():
    with pytest.raises(NotSupportedError, match="comm"):
        choose({"HORA_CONTROLLER": "tcp"}, comm_given=True)


class FakeComm:
    def py2f(self):
        return 3


def test_comm_argument_forms():
    assert _mpi_comm_argument(None) == (-1, [])
    assert _mpi_comm_argument(FakeComm()) == (3, [])
    assert _mpi_comm_argument([2, 0, 1]) == (-1, [2, 0, 1])
    assert _mpi_comm_argument(()) == (-1, [])
    with pytest.raises(TypeError):
        _mpi_comm_argument("0,1")
    with pytest.raises(TypeError):
        _mpi_comm_argument(7)
    with pytest.raises(ValueError):
        _mpi_comm_argument([0, True])


def test_single_host_mpirun_with_tcp_needs_no_address():
    info = rank_discovery.discover({**MPIRUN, "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert (info.store_host, info.store_port, info.serve_store) == ("127.0.0.1", 29400, True)
    with pytest.raises(ValueError, match="rendezvous store"):
        rank_discovery.discover({**MPIRUN, "OMPI_COMM_WORLD_LOCAL_SIZE": "1"})


def test_mpi_built_is_a_bool():
    assert isinstance(hora.mpi_built(), bool)


LAUNCHER_VARS = (
    "HORA_RANK", "HORA_SIZE", "HOROVOD_RANK", "HOROVOD_SIZE", "RANK", "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
    "SLURM_NTASKS",
)


@pytest.mark.parametrize("pair", [("mpi", "mpi"), ("mpi", "tcp"), ("tcp", "mpi")])
def test_mpi_outside_mpirun_is_refused(monkeypatch, pair):
    """horarun started 2 ranks but MPI sees each process alone: a clear error, not two jobs of 1."""
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HORA_RANK", "1")
    monkeypatch.setenv("HORA_SIZE", "2")
    monkeypatch.setenv("HORA_RENDEZVOUS_ADDR", "127.0.0.1")
    monkeypatch.setenv("HORA_RENDEZVOUS_PORT", "29400")
    with pytest.raises(NotSupportedError, match="start the job with mpirun"):
        _require_mpi_launch(rank_discovery.Transports(*pair), mpi_size=1)
    _require_mpi_launch(rank_discovery.Transports(*pair), mpi_size=2)  # mpirun under horarun --mpi
    monkeypatch.setenv("HORA_SIZE", "1")
    monkeypatch.setenv("HORA_RANK", "0")
    _require_mpi_launch(rank_discovery.Transports(*pair), mpi_size=1)  # a job of one
