"""horarun and hora.run with a rank started through ssh on this machine (127.0.0.1 forced through
ssh, next to a local rank). Needs sshd on 127.0.0.1:22 and the key that tests/ssh_setup.sh
creates (~/.ssh/hora_test_ed25519, or HORA_TEST_SSH_KEY); skipped otherwise."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import hora
import pytest
from launcher_children import child_env, default_sigint

KEY = os.environ.get("HORA_TEST_SSH_KEY", os.path.expanduser("~/.ssh/hora_test_ed25519"))
HOSTS = ["-H", "localhost:1,127.0.0.1:1", "--force-ssh", "127.0.0.1", "-p", "22", "-i", KEY]


def _ssh_unavailable():
    if shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"):
        return "sshd is not installed (tests/ssh_setup.sh installs and starts it)"
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=2).close()
    except OSError:
        return "sshd is not running on 127.0.0.1:22 (tests/ssh_setup.sh starts it)"
    if not os.path.exists(KEY):
        return f"no ssh key {KEY} (tests/ssh_setup.sh creates it)"
    probe = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                            "-o", "ConnectTimeout=10", "-i", KEY, "127.0.0.1", "true"],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        return f"ssh to 127.0.0.1 with {KEY} fails: {probe.stderr.strip()}"
    return None


_REASON = _ssh_unavailable()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def launcher(args, script):
    return [sys.executable, "-m", "hora.runner", *args, sys.executable, "-c",
            textwrap.dedent(script)]


def horarun(args, script, cwd=None, timeout=90):
    return subprocess.run(launcher(args, script), env=child_env(), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False)


def processes_with(token):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def assert_no_survivors(token, within=8.0):
    deadline = time.monotonic() + within
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(token) == []


def test_two_ranks_one_over_ssh(tmp_path):
    result = horarun(["-np", "2", *HOSTS, "--cycle-time-ms", "2"], """
        import hashlib, os
        import numpy as np
        import hora
        secret = os.environ["HORA_SECRET"]
        on_command_line = False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    on_command_line |= secret.encode() in f.read()
            except OSError:
                pass
        hora.init()
        total = hora.allreduce(np.array([hora.rank() + 1.0]), op=hora.Sum)
        print("rank", hora.rank(), hora.size(), hora.local_rank(), hora.cross_rank(),
              hora.cross_size(), total.tolist(), "ssh" if "SSH_CONNECTION" in os.environ
              else "local", os.getcwd(), os.environ["HORA_CYCLE_TIME"],
              hashlib.sha256(secret.encode()).hexdigest()[:12], "visible" if on_command_line
              else "hidden")
        hora.shutdown()
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        if "<stdout>:rank " in line:
            fields = line.split(":", 1)[1].split()
            lines[int(fields[1])] = fields
    assert sorted(lines) == [0, 1], result.stdout
    assert lines[0][2:7] == ["2", "0", "0", "2", "[3.0]"]
    assert lines[1][2:7] == ["2", "0", "1", "2", "[3.0]"]
    assert (lines[0][7], lines[1][7]) == ("local", "ssh")
    assert lines[0][8] == lines[1][8] == str(tmp_path)
    assert lines[0][9] == lines[1][9] == "2"
    assert lines[0][10] == lines[1][10]  # the same job secret on both ranks
    assert lines[0][11] == lines[1][11] == "hidden"


def test_remote_failure_stops_the_job():
    token = uuid.uuid4().hex
    start = time.monotonic()
    result = horarun(["-np", "2", *HOSTS], f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{token}"])
        if os.environ["HORA_RANK"] == "1":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(60)
    """)
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - start < 30
    assert "rank 1 on 127.0.0.1 exited with exit code 3" in result.stderr
    assert_no_survivors(token)


def test_local_failure_stops_the_remote_rank(tmp_path):
    token = uuid.uuid4().hex
    ready = tmp_path / "remote-ready"
    start = time.monotonic()
    result = horarun(["-np", "2", *HOSTS], f"""
        import os, signal, subprocess, sys, time
        if os.environ["HORA_RANK"] == "1":  # over ssh: ignores SIGTERM, has a child
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{token}"])
            open({str(ready)!r}, "w").close()
            time.sleep(60)
        deadline = time.time() + 30
        while time.time() < deadline and not os.path.exists({str(ready)!r}):
            time.sleep(0.05)
        sys.exit(4)
    """)
    assert result.returncode == 4, result.stderr
    assert ready.exists()
    assert "rank 0 exited with exit code 4" in result.stderr
    assert time.monotonic() - start < 45
    assert_no_survivors(token)


def test_sigint_stops_the_remote_rank():
    token = uuid.uuid4().hex
    command = launcher(["-np", "2", *HOSTS],
                       f"import time; print('up', flush=True); time.sleep(60)  # {token}")
    # The child only sets a disposition before exec, which no lock of another thread can block.
    proc = subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)  # noqa: PLW1509
    seen = 0
    while seen < 2:
        line = proc.stdout.readline()
        assert line, "launcher ended early"
        seen += "up" in line
    assert processes_with(token)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT
    assert "SIGINT" in err
    assert_no_survivors(token)


def test_hora_run_over_ssh(monkeypatch, capfd):
    def where(offset):
        import os

        import hora

        hora.init()
        total = hora.allreduce(__import__("numpy").array([hora.rank() + offset]), op=hora.Sum)
        hora.shutdown()
        print("task done")
        return int(total[0]), "SSH_CONNECTION" in os.environ

    monkeypatch.setenv("HORARUN_FORCE_SSH", "127.0.0.1")
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    results = hora.run(where, args=(5,), num_proc=2, hosts="localhost:1,127.0.0.1:1",
                       ssh_identity_file=KEY)
    assert results == [(11, False), (11, True)]
    out = capfd.readouterr().out
    assert "[1]<stdout>:task done" in out
    assert "hora.run result" not in out
