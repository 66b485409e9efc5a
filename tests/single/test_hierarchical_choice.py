"""When the hierarchical allreduce runs and when the flat path runs instead (one log line at Info
saying why), in jobs that horarun starts with ranks on one or two host names of this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import hora

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))

# Every rank checks a Sum against its closed form; rank 0 only asks for the hierarchical path
# when ONLY_RANK0 is set.
SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    if os.environ.get("ONLY_RANK0") and os.environ["HORA_RANK"] != "0":
        os.environ.pop("HORA_HIERARCHICAL_ALLREDUCE", None)
        os.environ.pop("HOROVOD_HIERARCHICAL_ALLREDUCE", None)
    import hora
    hora.init()
    n = hora.size()
    out = hora.allreduce(np.arange(1001, dtype=np.int64) * (hora.rank() + 1), op=hora.Sum)
    assert (out == np.arange(1001) * (n * (n + 1) // 2)).all()
    hora.shutdown()
""")


def _run(args: list[str], **extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(HORA_LOG_LEVEL="info", **extra)
    result = subprocess.run([sys.executable, "-m", "hora.runner", *args, sys.executable, "-c",
                             SCRIPT], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stderr


def test_two_hosts_take_the_hierarchical_paths_from_the_horarun_flags() -> None:
    err = _run(["--hierarchical-allreduce", "-np", "2", "-H", "localhost:1,127.0.0.1:1"])
    assert "hierarchical allreduce: 2 hosts x 1 ranks" in err
    assert "hierarchical allgather" not in err
    err = _run(["--hierarchical-allgather", "-np", "4", "-H", "localhost:2,127.0.0.1:2"])
    assert "hierarchical allgather: 2 hosts x 2 ranks" in err
    assert "hierarchical allreduce: 2 hosts x 2 ranks" in err  # the default, flag or not
    err = _run(["--no-hierarchical-allreduce", "--hierarchical-allgather", "-np", "4", "-H",
                "localhost:2,127.0.0.1:2"])
    assert "hierarchical allgather: 2 hosts x 2 ranks" in err
    assert "hierarchical allreduce" not in err


def test_ranks_of_each_host_share_memory_and_cross_hosts_over_tcp() -> None:
    """HORA_SHM_HOST_BY_NAME keeps the two names from sharing one job-wide segment, as two
    machines would: each host's ranks set up their own, the cross steps run over TCP."""
    err = _run(["-np", "4", "-H", "localhost:2,127.0.0.1:2"], HORA_HIERARCHICAL_ALLREDUCE="1",
               HORA_SHM_HOST_BY_NAME="1")
    assert "collectives stay on tcp, not shared memory: ranks 0 and 2 run on different hosts" in err
    assert "hierarchical allreduce: 2 hosts x 2 ranks; within rank 0's host over shm, across " \
        "hosts over tcp" in err
    err = _run(["-np", "4", "-H", "localhost:2,127.0.0.1:2"], HORA_HIERARCHICAL_ALLREDUCE="1",
               HORA_SHM_HOST_BY_NAME="1", HORA_SHM_DISABLE="1")
    assert "within rank 0's host over tcp, across hosts over tcp" in err
    assert "within rank 0's host the hierarchical steps stay on tcp: HORA_SHM_DISABLE is set" in err
    err = _run(["-np", "4", "-H", "localhost:2,127.0.0.1:2"], HORA_HIERARCHICAL_ALLREDUCE="1")
    assert "within rank 0's host over shm, across hosts over shm" in err


def test_one_host_stays_flat_and_says_why() -> None:
    err = _run(["-np", "2"], HOROVOD_HIERARCHICAL_ALLREDUCE="1", HOROVOD_HIERARCHICAL_ALLGATHER="1")
    assert "hierarchical allreduce not used: every rank runs on one host" in err
    assert "hierarchical allgather not used: every rank runs on one host" in err


def test_unequal_hosts_stay_flat_and_say_why() -> None:
    err = _run(["-np", "3", "-H", "localhost:2,127.0.0.1:1"], HORA_HIERARCHICAL_ALLREDUCE="1")
    assert "hierarchical allreduce not used: hosts run different numbers of ranks" in err


def test_one_rank_per_host_runs_it_only_when_every_rank_asks() -> None:
    err = _run(["-np", "2", "-H", "localhost:1,127.0.0.1:1"], HORA_HIERARCHICAL_ALLREDUCE="1",
               ONLY_RANK0="1")
    assert "hierarchical allreduce not used: 1 of 2 ranks set HORA_HIERARCHICAL_ALLREDUCE" in err


def test_by_default_hosts_of_two_ranks_take_the_hierarchical_allreduce() -> None:
    err = _run(["-np", "4", "-H", "localhost:2,127.0.0.1:2"], HORA_SHM_HOST_BY_NAME="1")
    assert "hierarchical allreduce: 2 hosts x 2 ranks; within rank 0's host over shm, across " \
        "hosts over tcp (chosen by the engine; HORA_HIERARCHICAL_ALLREDUCE=0 keeps it flat)" in err
    assert "hierarchical allgather" not in err
    err = _run(["-np", "4", "-H", "localhost:2,127.0.0.1:2"], HORA_HIERARCHICAL_ALLGATHER="auto")
    assert "hierarchical allgather: 2 hosts x 2 ranks; within rank 0's host over shm, across " \
        "hosts over shm (chosen by the engine; HORA_HIERARCHICAL_ALLGATHER=0 keeps it flat)" in err


def test_one_rank_per_host_and_the_off_switch_keep_the_flat_path_silently() -> None:
    err = _run(["-np", "2", "-H", "localhost:1,127.0.0.1:1"])
    assert "hierarchical allreduce" not in err
    err = _run(["--no-hierarchical-allreduce", "-np", "4", "-H", "localhost:2,127.0.0.1:2"])
    assert "hierarchical allreduce" not in err
    err = _run(["-np", "4", "-H", "localhost:2,127.0.0.1:2"], HORA_HIERARCHICAL_ALLREDUCE="0")
    assert "hierarchical allreduce" not in err


KILLED_SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    import hora
    hora.init()
    try:
        for i in range(200):
            if hora.rank() == 3 and i == 20:
                os._exit(0)  # abrupt, but status 0: horarun lets the others find out themselves
            hora.allreduce(np.ones(300000, np.float32), op=hora.Sum, name="k")
    except hora.HoraError as e:
        print(f"rank {hora.rank()} failed: {type(e).__name__}: {e}", flush=True)
""")


def test_a_killed_rank_fails_the_others_with_shared_memory_within_hosts() -> None:
    """A rank that vanishes mid-loop without shutting down (shared memory within its host, TCP
    across) makes every other rank's pending allreduce fail with a HoraError; rank 2, which shares
    its host's segment with rank 3, names it by its rank in the job (its index on the host is 1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(HORA_HIERARCHICAL_ALLREDUCE="1", HORA_SHM_HOST_BY_NAME="1", HORA_TIMEOUT_SECONDS="20")
    result = subprocess.run([sys.executable, "-m", "hora.runner", "-np", "4", "-H",
                             "localhost:2,127.0.0.1:2", sys.executable, "-c", KILLED_SCRIPT],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for r in (0, 1, 2):
        assert f"rank {r} failed: " in result.stdout, result.stdout + result.stderr
    rank2 = next(line for line in result.stdout.splitlines() if "rank 2 failed: " in line)
    assert "rank 3 " in rank2 and "rank 1 " not in rank2, rank2
