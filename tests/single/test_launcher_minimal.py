"""horarun on this host: slot plan, environment, output prefixes, failure and signal handling."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import hora
import pytest
from hora.runner import launch, slots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    for key in [k for k in env if k.startswith(("HORA_", "HOROVOD_"))]:
        del env[key]
    return env


def horarun(args, script=None, timeout=60):
    command = [sys.executable, "-m", "hora.runner", *args]
    if script is not None:
        command += [sys.executable, "-c", textwrap.dedent(script)]
    return subprocess.run(command, env=child_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_parse_hosts():
    assert slots.parse_hosts("a:2,b:4") == [slots.HostSlots("a", 2), slots.HostSlots("b", 4)]
    assert slots.parse_hosts("a") == [slots.HostSlots("a", 1)]
    for bad in ("a:0", "a:x", "a:1,a:2", ""):
        with pytest.raises(ValueError):
            slots.parse_hosts(bad)


def test_assign_slots_follows_horovods_plan():
    plan = slots.assign_slots(slots.parse_hosts("a:2,b:1,c:2"), 5)
    coords = [(s.hostname, s.local_rank, s.local_size, s.cross_rank, s.cross_size) for s in plan]
    assert coords == [("a", 0, 2, 0, 3), ("a", 1, 2, 0, 2), ("b", 0, 1, 1, 3),
                      ("c", 0, 2, 2, 3), ("c", 1, 2, 1, 2)]
    with pytest.raises(ValueError):
        slots.assign_slots(slots.parse_hosts("a:2"), 3)


def test_plan_accepts_any_host_names_and_needs_np():
    assert [s.hostname for s in launch.plan(3, "node1:2,node2:2")] == ["node1", "node1", "node2"]
    with pytest.raises(ValueError, match="-np"):
        launch.plan(None, None)
    assert len(launch.plan(None, "localhost:3")) == 3


def test_ranks_get_topology_and_prefixed_output():
    result = horarun(["-np", "3"], """
        import os, sys
        keys = ["RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"]
        print(" ".join(os.environ["HORA_" + k] for k in keys))
        print("to-stderr", file=sys.stderr)
        sys.stdout.write("no newline")
    """)
    assert result.returncode == 0, result.stderr
    for rank in range(3):
        assert f"[{rank}]<stdout>:{rank} 3 {rank} 3 0 1\n" in result.stdout
        assert f"[{rank}]<stdout>:no newline\n" in result.stdout
        assert f"[{rank}]<stderr>:to-stderr\n" in result.stderr


def test_collectives_across_ranks():
    result = horarun(["-np", "2"], """
        import numpy as np, hora
        hora.init()
        total = hora.allreduce(np.full(3, hora.rank() + 1.0), op=hora.Sum)
        gathered = hora.allgather(np.array([hora.rank()]))
        print("result", total.tolist(), gathered.tolist(), hora._core.transport_name())
        hora.shutdown()
    """)
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(2):
        # Both ranks run on this host: data moves through shared memory, negotiation over TCP.
        assert f"[{rank}]<stdout>:result [3.0, 3.0, 3.0] [0, 1] tcp+shm" in result.stdout


def test_in_flight_names_and_dropped_handles_across_ranks():
    result = horarun(["-np", "2"], """
        import gc, sys, time
        import numpy as np, hora
        from hora.common import ops
        hora.init()
        x = np.ones(1000)
        baseline = sys.getrefcount(x)
        if hora.rank() == 1:
            time.sleep(1)  # rank 0's request stays in flight meanwhile
        handle = ops.enqueue("allreduce", [x], names=["allreduce.held"], op=hora.Sum)[0]
        if hora.rank() == 0:
            try:
                ops.enqueue("allreduce", [np.ones(2)], names=["allreduce.held"])
                print("duplicate accepted")
            except ValueError:
                print("duplicate refused")
            print("pending", not handle.poll())
        del handle
        gc.collect()
        hora.barrier()
        print("released", sys.getrefcount(x) == baseline, x[0])
        hora.shutdown()
    """)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[0]<stdout>:duplicate refused" in result.stdout
    assert "[0]<stdout>:pending True" in result.stdout
    for rank in range(2):
        assert f"[{rank}]<stdout>:released True 2.0" in result.stdout


def test_first_failure_stops_the_job_with_its_exit_code():
    start = time.monotonic()
    result = horarun(["-np", "3"], """
        import os, sys, time
        if os.environ["HORA_RANK"] == "1":
            sys.exit(3)
        time.sleep(60)
    """)
    assert result.returncode == 3
    assert time.monotonic() - start < 20
    assert "rank 1 exited with exit code 3" in result.stderr


def test_rank_ignoring_sigterm_is_killed_after_grace():
    start = time.monotonic()
    result = horarun(["-np", "2"], """
        import os, signal, sys, time
        if os.environ["HORA_RANK"] == "0":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ready", flush=True)
            time.sleep(60)
        time.sleep(1)
        sys.exit(4)
    """)
    elapsed = time.monotonic() - start
    assert result.returncode == 4
    assert 5 <= elapsed < 20
    assert "rank 0 did not stop within 5 s of being asked; killing it" in result.stderr


def test_sigterm_to_launcher_stops_all_ranks():
    command = [sys.executable, "-m", "hora.runner", "-np", "2", sys.executable, "-c",
               "import time; print('up', flush=True); time.sleep(60)"]
    proc = subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen = 0
    while seen < 2:
        line = proc.stdout.readline()
        assert line, "launcher ended early"
        seen += "up" in line
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "SIGTERM" in err


def test_usage_errors():
    assert horarun(["-np", "2"]).returncode == 2
    assert horarun(["-np", "3", "-H", "localhost:2", "true"]).returncode == 2
    assert horarun(["-np", "1", "/nonexistent/command"]).returncode == 127
