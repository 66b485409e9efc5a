"""Rank discovery from launcher, torchrun, mpirun and Slurm variables (no engine started)."""

import logging
import sys

import pytest
from hora.runner import rank_discovery
from hora.runner.rank_discovery import RankInfo, discover

HORARUN = {
    "HORA_RANK": "1", "HORA_SIZE": "4", "HORA_LOCAL_RANK": "1", "HORA_LOCAL_SIZE": "2",
    "HORA_CROSS_RANK": "0", "HORA_CROSS_SIZE": "2", "HORA_HOSTNAME": "node-a",
    "HORA_RENDEZVOUS_ADDR": "10.0.0.5", "HORA_RENDEZVOUS_PORT": "4242", "HORA_SECRET": "s3cret",
}


def test_alone_without_any_variables():
    info = discover({})
    assert (info.rank, info.size, info.local_rank, info.local_size) == (0, 1, 0, 1)
    assert (info.cross_rank, info.cross_size) == (0, 1)
    assert info.store_host == "" and not info.serve_store and info.source == "alone"


def test_horarun_variables():
    info = discover(HORARUN)
    assert info == RankInfo(1, 4, 1, 2, 0, 2, "10.0.0.5", 4242, False, "s3cret", "node-a",
                            "horarun")


def test_horovod_names_are_accepted_and_hora_wins():
    env = {k.replace("HORA_", "HOROVOD_"): v for k, v in HORARUN.items()}
    assert discover(env).rank == 1
    env["HORA_RANK"] = "2"
    assert discover(env).rank == 2


def test_horovod_gloo_rendezvous_and_secret_key():
    env = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "h",
           "HOROVOD_GLOO_RENDEZVOUS_PORT": "99", "_HOROVOD_SECRET_KEY": "k"}
    info = discover(env)
    assert (info.store_host, info.store_port, info.secret) == ("h", 99, "k")


def test_horarun_defaults_for_missing_local_values():
    info = discover({"HORA_RANK": "0", "HORA_SIZE": "1"})
    assert (info.local_rank, info.local_size, info.cross_rank, info.cross_size) == (0, 1, 0, 1)
    assert info.source == "horarun"


def test_horarun_without_rendezvous_fails_for_several_ranks():
    with pytest.raises(ValueError, match="rendezvous"):
        discover({"HORA_RANK": "0", "HORA_SIZE": "2"})


@pytest.mark.parametrize("env, message", [
    ({"HORA_RANK": "x", "HORA_SIZE": "2"}, "not an integer"),
    ({"HORA_RANK": "2", "HORA_SIZE": "2"}, "outside"),
    ({"HORA_RANK": "0"}, "HORA_SIZE is not set"),
])
def test_inconsistent_launcher_variables(env, message):
    with pytest.raises(ValueError, match=message):
        discover(env)


def torchrun_env(rank, **extra):
    env = {"RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(rank % 2),
           "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "job"}
    env.update(extra)
    return env


def test_torchrun_uses_master_port_plus_one_and_rank0_serves():
    info = discover(torchrun_env(3))
    assert (info.rank, info.size, info.local_rank, info.local_size) == (3, 4, 1, 2)
    assert (info.cross_rank, info.cross_size) == (1, 2)
    assert (info.store_host, info.store_port, info.serve_store) == ("10.1.1.1", 29501, False)
    assert info.source == "torchrun"
    assert discover(torchrun_env(0)).serve_store
    # Every rank knows that rank 0 serves the store (its errors say so); under horarun none does.
    assert info.store_served_by_rank0 and discover(torchrun_env(0)).store_served_by_rank0
    assert not discover(HORARUN).store_served_by_rank0


def test_torchrun_explicit_hora_port_and_group_rank():
    info = discover(torchrun_env(2, HORA_RENDEZVOUS_PORT="7000", GROUP_RANK="1",
                                 GROUP_WORLD_SIZE="2"))
    assert info.store_port == 7000 and (info.cross_rank, info.cross_size) == (1, 2)


def test_torchrun_single_process_needs_no_store():
    info = discover({"RANK": "0", "WORLD_SIZE": "1"})
    assert info.store_host == "" and not info.serve_store and info.secret == ""


def test_launcher_variables_win_over_torchrun():
    env = dict(torchrun_env(3))
    env.update(HORARUN)
    assert discover(env).source == "horarun"


def test_mpirun_open_mpi():
    env = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "HORA_RENDEZVOUS_ADDR": "head"}
    info = discover(env)
    assert (info.rank, info.cross_rank, info.cross_size) == (2, 1, 2)
    assert (info.store_host, info.store_port, info.source) == ("head", 29400, "mpirun")


def slurm_env(procid, localid, nodeid, **extra):
    env = {"SLURM_PROCID": str(procid), "SLURM_NTASKS": "6", "SLURM_LOCALID": str(localid),
           "SLURM_NODEID": str(nodeid), "SLURM_STEP_TASKS_PER_NODE": "4,2",
           "SLURM_STEP_NODELIST": "gpu[07-08]"}
    env.update(extra)
    return env


def test_slurm_heterogeneous_nodes():
    info = discover(slurm_env(5, 1, 1))
    assert (info.rank, info.size, info.local_rank, info.local_size) == (5, 6, 1, 2)
    assert (info.cross_rank, info.cross_size) == (1, 2)
    assert (info.store_host, info.store_port, info.serve_store) == ("gpu07", 29400, False)
    info = discover(slurm_env(3, 3, 0))
    assert (info.local_size, info.cross_rank, info.cross_size) == (4, 0, 1)
    assert discover(slurm_env(0, 0, 0)).serve_store


def test_slurm_rendezvous_from_master_addr():
    info = discover(slurm_env(1, 1, 0, MASTER_ADDR="m", MASTER_PORT="1234"))
    assert (info.store_host, info.store_port) == ("m", 1234)


def test_slurm_fixed_tasks_per_node():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "a,b"}
    info = discover(env)
    assert (info.local_size, info.cross_rank, info.cross_size, info.store_host) == (2, 1, 2, "a")


@pytest.mark.parametrize("text, expected", [
    ("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1,3(x2)", [1, 3, 3]),
])
def test_parse_tasks_per_node(text, expected):
    assert rank_discovery.parse_tasks_per_node(text) == expected


@pytest.mark.parametrize("nodelist, expected", [
    ("node1", "node1"), ("a,b", "a"), ("gpu[07-09,12],cpu1", "gpu07"), ("n[3,5]x", "n3x"),
])
def test_first_host(nodelist, expected):
    assert rank_discovery.first_host(nodelist) == expected


def test_no_secret_is_derived_from_public_values():
    assert discover(torchrun_env(1)).secret == ""
    assert discover(slurm_env(2, 1, 0, MASTER_ADDR="m", MASTER_PORT="1234")).secret == ""
    assert discover(torchrun_env(1, HORA_SECRET="mine")).secret == "mine"
    assert not hasattr(rank_discovery, "fallback_secret")


def test_secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text("from-file\n")
    assert discover(torchrun_env(1, HORA_SECRET_FILE=str(path))).secret == "from-file"
    both = torchrun_env(1, HORA_SECRET="env", HORA_SECRET_FILE=str(path))
    assert discover(both).secret == "env"
    with pytest.raises(ValueError, match="cannot read it"):
        discover(torchrun_env(1, HORA_SECRET_FILE=str(tmp_path / "missing")))
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        discover(torchrun_env(1, HORA_SECRET_FILE=str(tmp_path / "empty")))


MPIRUN_REMOTE = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
                 "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                 "MASTER_ADDR": "10.1.1.1"}


@pytest.mark.parametrize("env", [
    torchrun_env(0), torchrun_env(1), MPIRUN_REMOTE,
    slurm_env(2, 1, 0, MASTER_ADDR="10.1.1.1", MASTER_PORT="1234"),
], ids=["torchrun-rank0", "torchrun-rank1", "mpirun", "slurm"])
def test_no_secret_on_a_network_address_is_refused(env):
    info = discover(env)
    with pytest.raises(ValueError, match="without a job secret") as caught:
        rank_discovery.checked_secret(info, "10.1.1.2", environ=env)
    for name in ("HORA_SECRET", "HORA_SECRET_FILE", "HORA_INSECURE=1"):
        assert name in str(caught.value)
    # The explicit opt-in lets it run, unauthenticated.
    assert rank_discovery.checked_secret(info, "10.1.1.2", environ={**env, "HORA_INSECURE": "1"}) == ""
    for off in ("0", "no", ""):
        with pytest.raises(ValueError):
            rank_discovery.checked_secret(info, "10.1.1.2", environ={**env, "HORA_INSECURE": off})
    secured = discover({**env, "HORA_SECRET": "s"})
    assert rank_discovery.checked_secret(secured, "10.1.1.2", environ=env) == "s"


def test_torchrun_variables_set_by_a_trainer_name_it_and_its_fix(monkeypatch):
    """Ray Train sets RANK, WORLD_SIZE and MASTER_ADDR (the node's address) on its workers; an
    hvd.init() there names Ray Train, not torchrun, and the one line that gives a secret."""
    import types

    env = {k: v for k, v in torchrun_env(0).items() if k != "TORCHELASTIC_RUN_ID"}
    assert discover(env).source == "torch.distributed"
    monkeypatch.setitem(sys.modules, "ray.train", types.ModuleType("ray.train"))
    info = discover(env)
    assert info.source == "Ray Train"
    with pytest.raises(ValueError) as caught:
        rank_discovery.checked_secret(info, "10.1.1.2", environ={},
                                 fix=rank_discovery.secret_fix(info.source, store=False))
    assert str(caught.value).startswith("Ray Train: rank 0 would listen on the non-loopback")
    assert ("To give it one: ray.init(runtime_env={'env_vars': {'HORA_SECRET': '<random hex>'}})"
            in str(caught.value))
    # Hora's own launchers get checked_secret's advice alone.
    for launcher in ("horarun", "mpirun", "slurm"):
        assert rank_discovery.secret_fix(launcher, store=False) == ""
    assert rank_discovery.secret_fix("torchrun", store=False).startswith("export HORA_SECRET=")


def test_insecure_warns_on_rank_0_only(caplog):
    env = {"HORA_INSECURE": "1"}
    with caplog.at_level(logging.WARNING, logger="hora"):
        rank_discovery.checked_secret(discover(torchrun_env(1)), "10.1.1.2", environ=env)
        assert not caplog.records
        rank_discovery.checked_secret(discover(torchrun_env(0)), "10.1.1.2", environ=env)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "HORA_INSECURE" in caplog.records[0].getMessage()


def test_loopback_or_single_rank_jobs_need_no_secret():
    for master in ("127.0.0.1", "localhost"):
        info = discover(torchrun_env(1, MASTER_ADDR=master))
        assert rank_discovery.checked_secret(info, "127.0.0.1", environ={}) == ""
        # Listening on a network interface (HORA_IFACE) is not a loopback job any more.
        with pytest.raises(ValueError, match="HORA_SECRET"):
            rank_discovery.checked_secret(info, "10.1.1.2", environ={})
    alone = discover({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "10.1.1.1"})
    assert rank_discovery.checked_secret(alone, "", environ={}) == ""
    # A TCP part beside MPI has no store address yet: the engine makes a secret over MPI.
    over_mpi = rank_discovery.RankInfo(0, 2, source="mpi")
    assert rank_discovery.checked_secret(over_mpi, "", environ={}) == ""


def test_listen_host_is_the_loopback_for_a_local_job(monkeypatch):
    monkeypatch.delenv("HORA_IFACE", raising=False)
    monkeypatch.delenv("HOROVOD_IFACE", raising=False)
    assert rank_discovery.listen_host("127.0.0.1") == "127.0.0.1"
    assert rank_discovery.listen_host("localhost") == "127.0.0.1"
    assert rank_discovery.listen_host("") == ""
    monkeypatch.setenv("HORA_IFACE", "10.9.8.7")
    assert rank_discovery.listen_host("127.0.0.1") == "10.9.8.7"
    assert rank_discovery.is_loopback("127.0.0.2") and not rank_discovery.is_loopback("10.0.0.1")


def test_undeclared_hora_variable_is_refused():
    with pytest.raises(ValueError, match="not a declared"):
        rank_discovery._Env({}).hora("NOT_A_SETTING")


def test_reads_the_process_environment(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in HORARUN.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOROVOD_RANK", "3")
    info = discover()
    assert (info.rank, info.store_port, info.secret) == (1, 4242, "s3cret")
