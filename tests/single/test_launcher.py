"""horarun: flags to environment, config file, slot plans, hostfiles, output, failures, mpirun and
ssh command lines, -cb, and hora.run on this host. Only loopback addresses are used."""

import argparse
import importlib.metadata
import os
import platform
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import hora
import pytest
from hora import _core
from hora.runner import (
    check_build,
    config,
    env,
    hosts,
    job,
    launch,
    mpirun,
    output,
    slots,
    ssh_exec,
    task,
)
from launcher_children import child_env, default_sigint

DECLARED = [name for name, _default, _doc in _core.env_vars()]


def horarun(args, script=None, timeout=60, **extra_env):
    command = [sys.executable, "-m", "hora.runner", *args]
    if script is not None:
        command += [sys.executable, "-c", textwrap.dedent(script)]
    return subprocess.run(command, env=child_env(**extra_env), capture_output=True, text=True,
                          timeout=timeout, check=False)


def processes_with(token):
    """Live processes (not zombies) whose command line contains ``token``."""
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


def assert_no_survivors(token, within=5.0):
    deadline = time.monotonic() + within
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(token) == []


ALL_SETTING_FLAGS = [
    "--fusion-threshold-mb", "2.5", "--cycle-time-ms", "0.5", "--cache-capacity", "16",
    "--timeline-filename", "/tmp/tl.json", "--timeline-mark-cycles", "--autotune",
    "--autotune-log-file", "/tmp/at.csv", "--autotune-warmup-samples", "2",
    "--autotune-steps-per-sample", "7", "--no-stall-check",
    "--stall-check-warning-time-seconds", "12", "--stall-check-shutdown-time-seconds", "30",
    "--log-level", "DEBUG", "--log-without-timestamp", "--start-timeout", "45",
    "--gloo-timeout-seconds", "90", "--gloo",
]
EXPECTED_SETTINGS = {
    "HORA_FUSION_THRESHOLD": str(int(2.5 * 1048576)), "HORA_CYCLE_TIME": "0.5",
    "HORA_CACHE_CAPACITY": "16", "HORA_TIMELINE": "/tmp/tl.json",
    "HORA_TIMELINE_MARK_CYCLES": "1", "HORA_AUTOTUNE": "1", "HORA_AUTOTUNE_LOG": "/tmp/at.csv",
    "HORA_AUTOTUNE_WARMUP_SAMPLES": "2", "HORA_AUTOTUNE_STEPS_PER_SAMPLE": "7",
    "HORA_STALL_CHECK_DISABLE": "1", "HORA_STALL_CHECK_TIME_SECONDS": "12",
    "HORA_STALL_SHUTDOWN_TIME_SECONDS": "30", "HORA_LOG_LEVEL": "debug",
    "HORA_LOG_HIDE_TIME": "1", "HORA_START_TIMEOUT": "45", "HORA_TIMEOUT_SECONDS": "90",
    "HORA_CONTROLLER": "tcp", "HORA_CPU_OPERATIONS": "tcp",
}


# ------------------------------------------------------------------------------------------------
# Flags and config file


def test_every_setting_flag_sets_its_variable():
    args = launch.parse_args([*ALL_SETTING_FLAGS, "python", "train.py"])
    assert args.command == ["python", "train.py"]
    assert env.settings_env(args) == EXPECTED_SETTINGS
    assert env.undeclared(EXPECTED_SETTINGS, DECLARED) == []


def test_every_hora_variable_the_launcher_can_set_is_declared():
    names = {"HORA_" + s.var for s in env.SETTINGS} | {"HORA_CONTROLLER", "HORA_CPU_OPERATIONS"}
    slot = slots.assign_slots([slots.HostSlots("a", 1)], 1)[0]
    names |= set(env.topology_env(slot)) | set(env.rendezvous_env("h", 1))
    names |= set(env.interface_env("lo")) | set(env.private_env("s"))
    assert env.undeclared(dict.fromkeys(names, ""), DECLARED) == []


def test_transport_flags():
    def settings(*flags):
        return env.settings_env(launch.parse_args([*flags, "cmd"]))

    assert settings() == {}
    assert settings("--disable-cache") == {"HORA_CACHE_CAPACITY": "0"}
    assert settings("--tcp") == {"HORA_CONTROLLER": "tcp", "HORA_CPU_OPERATIONS": "tcp",
                                 "NCCL_IB_DISABLE": "1"}
    assert settings("--mpi") == {"HORA_CONTROLLER": "mpi", "HORA_CPU_OPERATIONS": "mpi"}
    assert settings("--fusion-threshold-mb", "0")["HORA_FUSION_THRESHOLD"] == "0"


def test_hierarchical_flags_set_horovod_and_hora_variables(capsys):
    def settings(*flags):
        return env.settings_env(launch.parse_args([*flags, "cmd"]))

    assert "HOROVOD_HIERARCHICAL_ALLREDUCE" not in settings()
    for name in ("allreduce", "allgather"):
        var = "HIERARCHICAL_" + name.upper()
        on = settings(f"--hierarchical-{name}")
        assert on["HOROVOD_" + var] == on["HORA_" + var] == "1"
        off = settings(f"--no-hierarchical-{name}")
        assert off["HOROVOD_" + var] == off["HORA_" + var] == "0"
        with pytest.raises(SystemExit):  # one or the other, as horovodrun
            launch.parse_args([f"--hierarchical-{name}", f"--no-hierarchical-{name}", "cmd"])
    launch.warn_compat(launch.parse_args(["--hierarchical-allreduce", "cmd"]))
    assert "no effect" not in capsys.readouterr().err
    assert env.undeclared(settings("--hierarchical-allreduce", "--hierarchical-allgather"),
                          DECLARED) == []


def test_launcher_flags_are_parsed():
    args = launch.parse_args([
        "-np", "4", "-H", "a:2,b:2", "-p", "2222", "-i", "/k", "--network-interface", "eth1,eth0",
        "--output-filename", "/tmp/out", "--verbose", "-x", "FOO", "-x", "BAR=1",
        "--mpi-args=--oversubscribe", "--", "python", "-u", "x.py", "--verbose",
    ])
    assert (args.num_proc, args.hosts, args.ssh_port, args.ssh_identity_file) == (4, "a:2,b:2",
                                                                                 2222, "/k")
    assert args.network_interface == "eth1,eth0"
    assert job.first_interface(args.network_interface) == "eth1"
    assert (args.output_filename, args.verbose, args.env) == ("/tmp/out", True, ["FOO", "BAR=1"])
    assert args.mpi_args == "--oversubscribe"
    assert args.command == ["python", "-u", "x.py", "--verbose"]
    assert launch.parse_args(["-hostfile", "/h", "cmd"]).hostfile == "/h"
    assert launch.parse_args(["--network-interfaces", "lo", "cmd"]).network_interface == "lo"


def test_bad_flag_values_are_usage_errors():
    for bad in (["--log-level", "loud"], ["--fusion-threshold-mb", "-1"], ["--gloo", "--mpi"],
                ["--cycle-time-ms", "x"]):
        with pytest.raises(SystemExit) as exc:
            launch.parse_args([*bad, "cmd"])
        assert exc.value.code == 2


def test_compat_flags_warn(capsys):
    args = launch.parse_args(["--torus-allreduce", "--num-nccl-streams", "2", "cmd"])
    launch.warn_compat(args)
    err = capsys.readouterr().err
    assert "--torus-allreduce has no effect" in err
    assert "--num-nccl-streams has no effect" in err


def test_config_file_sets_defaults_and_command_line_wins(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent("""
        # a job
        np: 2
        fusion-threshold-mb: 8
        cycle_time_ms: 3.5
        verbose: true
        no-stall-check: true
        log-level: info
        hosts: "localhost:2"
        env: [FOO, BAR=2]
        ssh-port: 2200
    """))
    args = launch.parse_args(["--config-file", str(path), "--cycle-time-ms", "7", "cmd"])
    assert args.verbose and args.hosts == "localhost:2" and args.ssh_port == 2200
    assert args.num_proc == 2
    assert args.env == ["FOO", "BAR=2"]
    settings = env.settings_env(args)
    assert settings["HORA_FUSION_THRESHOLD"] == str(8 * 1048576)
    assert settings["HORA_CYCLE_TIME"] == "7"
    assert settings["HORA_STALL_CHECK_DISABLE"] == "1"
    assert settings["HORA_LOG_LEVEL"] == "info"


@pytest.mark.parametrize("text, message", [
    ("no-such-flag: 1\n", "unknown key 'no-such-flag'"),
    ("verbose: 3\n", "expected true or false"),
    ("cache-capacity: lots\n", "cache-capacity"),
    ("log-level: loud\n", "must be one of"),
    ("- a\n- b\n", "must hold a mapping"),
    ("a: [\n", "not valid YAML"),
    ("config-file: x.yaml\n", "unknown key"),
])
def test_config_file_errors(tmp_path, text, message):
    pytest.importorskip("yaml")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=message):
        config.apply(launch.build_parser(), str(path))


def test_config_file_without_pyyaml_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)
    path = tmp_path / "job.yaml"
    path.write_text("verbose: true\n")
    with pytest.raises(config.ConfigError, match="pip install pyyaml"):
        config.load_yaml(str(path))


def test_config_file_error_exits_2(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "bad.yaml"
    path.write_text("bogus: 1\n")
    result = horarun(["--config-file", str(path), "-np", "1", "true"])
    assert result.returncode == 2
    assert "unknown key 'bogus'" in result.stderr


# ------------------------------------------------------------------------------------------------
# Slot plans and hosts


def test_uneven_slot_plan():
    plan = launch.plan(None, "a:2,b:1,c:3")
    table = [(s.rank, s.hostname, s.local_rank, s.local_size, s.cross_rank, s.cross_size)
             for s in plan]
    assert table == [
        (0, "a", 0, 2, 0, 3), (1, "a", 1, 2, 0, 2), (2, "b", 0, 1, 1, 3),
        (3, "c", 0, 3, 2, 3), (4, "c", 1, 3, 1, 2), (5, "c", 2, 3, 0, 1),
    ]
    partial = launch.plan(4, "a:2,b:1,c:3")
    assert [(s.hostname, s.local_size, s.cross_rank, s.cross_size) for s in partial] == [
        ("a", 2, 0, 3), ("a", 2, 0, 1), ("b", 1, 1, 3), ("c", 1, 2, 3)]
    assert slots.used_hosts(launch.plan(2, "a:2,b:1")) == ["a"]


def test_host_list_rules(tmp_path):
    assert launch.host_list(3, None) == [slots.HostSlots("localhost", 3)]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("x slots=2\n")
    with pytest.raises(ValueError, match="not both"):
        launch.host_list(2, "a:1", str(hostfile))
    assert launch.plan(None, None, str(hostfile))[1].hostname == "x"
    with pytest.raises(ValueError, match="cannot place 3"):
        launch.plan(3, "a:1,b:1")


def test_hostfile_parsing(tmp_path):
    text = textwrap.dedent("""
        # cluster
        node1 slots=4
        node2   slots = 2   # trailing comment

        node3:3
        node4
        node5 slots=2 max_slots=8
    """)
    assert hosts.parse_hostfile_text(text) == [
        slots.HostSlots("node1", 4), slots.HostSlots("node2", 2), slots.HostSlots("node3", 3),
        slots.HostSlots("node4", 1), slots.HostSlots("node5", 2)]
    path = tmp_path / "hf"
    path.write_text("a slots=1\nb slots=0\n")
    with pytest.raises(ValueError, match=r"hf:2: .*not a positive integer"):
        hosts.parse_hostfile(str(path))
    for bad, message in (("a slots=1\na slots=2\n", "listed twice"), ("# only\n\n", "no hosts"),
                         ("a colour=red\n", "unknown option"), ("a slots\n", "key=value")):
        with pytest.raises(ValueError, match=message):
            hosts.parse_hostfile_text(bad)
    with pytest.raises(ValueError, match="cannot read hostfile"):
        hosts.parse_hostfile(str(tmp_path / "missing"))


def test_local_host_detection(monkeypatch):
    assert hosts.is_local_host("localhost")
    assert hosts.is_local_host("127.0.0.1")
    assert hosts.is_local_host("127.3.4.5")
    assert hosts.is_local_host("user@127.0.0.1")
    assert hosts.is_local_host(os.uname().nodename)
    for address in hosts.interface_addresses().values():
        assert hosts.is_local_host(address)
    monkeypatch.setattr(hosts, "resolve", lambda name: [])
    assert not hosts.is_local_host("node17")
    assert job.remote_hosts(["localhost", "node17"]) == ["node17"]
    assert job.remote_hosts(["localhost", "127.0.0.1"], force_ssh=["127.0.0.1"]) == ["127.0.0.1"]


def test_route_lookup_on_loopback():
    assert hosts.interface_addresses().get("lo") == "127.0.0.1"
    assert hosts.route_via_socket("127.0.0.1") == "127.0.0.1"
    assert hosts.route_to("127.0.0.1") == ("127.0.0.1", "lo")
    assert hosts.interface_of("127.0.0.1") == "lo"


def test_rendezvous_choice(monkeypatch):
    assert job.choose_rendezvous([], None) == job.Rendezvous("127.0.0.1", "127.0.0.1", "lo")
    assert job.choose_rendezvous(["127.0.0.1"], None) == job.Rendezvous("0.0.0.0", "127.0.0.1",
                                                                       "lo")
    assert job.choose_rendezvous(["anyhost"], "lo") == job.Rendezvous("0.0.0.0", "127.0.0.1",
                                                                     "lo")
    with pytest.raises(ValueError, match="no IPv4 address"):
        job.choose_rendezvous([], "nosuchif0")
    monkeypatch.setattr(hosts, "resolve", lambda name: [])
    with pytest.raises(ValueError, match="cannot resolve"):
        job.choose_rendezvous(["node17"], None)


# ------------------------------------------------------------------------------------------------
# Rank environments and ssh command lines


def _specs(args_list, remote, base):
    args = launch.parse_args([*args_list, "python", "t.py"])
    plan = launch.plan(args.num_proc, args.hosts, args.hostfile)
    rendezvous = job.Rendezvous("0.0.0.0", "10.1.2.3", "eth9")
    return job.build_specs(args, args.command, plan, remote, rendezvous, 4242, "topsecret", base,
                           remote_private={"HORARUN_TASK_CHUNKS": "0"}, cwd="/work dir")


def test_rank_specs_local_and_remote():
    base = {"PATH": "/bin", "PYTHONPATH": "/pp", "HORA_CUSTOM": "1", "HOROVOD_X": "2",
            "UNRELATED": "3", "HORA_SECRET": "old", "FOO": "foo"}
    specs = _specs(["-np", "3", "-H", "localhost:2,node2:1", "-x", "FOO", "-x", "BAR=b",
                    "-p", "2222", "-i", "/id", "--cycle-time-ms", "2"], ["node2"], base)
    local, remote = specs[1], specs[2]
    assert not local.remote and local.stdin is None and local.argv == ["python", "t.py"]
    assert local.env["HORA_SECRET"] == "topsecret"
    assert local.env["UNRELATED"] == "3" and local.env["FOO"] == "foo" and local.env["BAR"] == "b"
    assert local.env["HORA_IFACE"] == "eth9" and local.env["HORA_CYCLE_TIME"] == "2"
    assert (local.env["HORA_RANK"], local.env["HORA_LOCAL_RANK"]) == ("1", "1")
    assert "HORARUN_TASK_CHUNKS" not in local.env
    assert remote.remote and remote.host == "node2"
    assert "topsecret" not in " ".join(remote.argv) and "old" not in " ".join(remote.argv)
    assert "HORA_SECRET" not in remote.env  # the ssh client's own environment
    assert remote.stdin == b"HORA_SECRET=topsecret\nHORARUN_TASK_CHUNKS=0\n\n"
    assert remote.argv[:9] == ["ssh", "-o", "BatchMode=yes", "-o",
                               "StrictHostKeyChecking=accept-new",
                               "-p", "2222", "-i", "/id"]
    assert remote.argv[9] == "node2"
    words = shlex.split(remote.argv[10])
    assert words[:3] == ["cd", "/work dir", ">/dev/null"]
    env_at = words.index("env")
    assignments = dict(w.split("=", 1) for w in words[env_at + 1:-2])
    assert words[-2:] == ["python", "t.py"]
    assert assignments["PATH"] == "/bin" and assignments["PYTHONPATH"] == "/pp"
    assert assignments["HORA_CUSTOM"] == "1" and assignments["HOROVOD_X"] == "2"
    assert assignments["FOO"] == "foo" and assignments["BAR"] == "b"
    assert "UNRELATED" not in assignments and "HORA_SECRET" not in assignments
    assert assignments["HORA_RANK"] == "2" and assignments["HORA_CROSS_RANK"] == "1"
    assert assignments["HORA_RENDEZVOUS_ADDR"] == "10.1.2.3"
    assert assignments["HORA_RENDEZVOUS_PORT"] == "4242"
    assert "HORA_IFACE" not in assignments  # the remote host's interface is not known here


def test_network_interface_flag_reaches_every_rank():
    specs = _specs(["-np", "2", "-H", "localhost:1,node2:1", "--network-interface", "eth1"],
                   ["node2"], {"PATH": "/bin"})
    assert specs[0].env["HORA_IFACE"] == "eth1" and specs[0].env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert "HORA_IFACE=eth1" in shlex.split(specs[1].argv[-1])


def test_exported_env_and_exports():
    environ = {"PATH": "/p", "LD_LIBRARY_PATH": "/l", "VIRTUAL_ENV": "/v", "HORA_A": "1",
               "HOROVOD_B": "2", "NCCL_DEBUG": "INFO", "HOME": "/root", "HORA_SECRET": "s",
               "_HOROVOD_SECRET_KEY": "k", "BASH_FUNC_x%%": "() {}"}
    assert env.exported_env(environ) == {"PATH": "/p", "LD_LIBRARY_PATH": "/l",
                                         "VIRTUAL_ENV": "/v", "HORA_A": "1", "HOROVOD_B": "2",
                                         "NCCL_DEBUG": "INFO"}
    assert env.parse_exports(["HOME", "MISSING", "X=1=2"], environ) == {"HOME": "/root",
                                                                      "X": "1=2"}
    with pytest.raises(ValueError, match="not a valid variable name"):
        env.parse_exports(["1BAD"], environ)


def test_ssh_payload_and_quoting():
    assert ssh_exec.stdin_payload({"A": "1", "B": "x y"}) == b"A=1\nB=x y\n\n"
    with pytest.raises(ValueError):
        ssh_exec.stdin_payload({"A": "two\nlines"})
    with pytest.raises(ValueError):
        ssh_exec.remote_command("/", {"BAD NAME": "1"}, ["true"], 3)
    cmd = ssh_exec.remote_command("/tmp/it's here", {"V": "a 'b' $c"}, ["echo", "$HOME;"], 3)
    words = shlex.split(cmd)
    assert words[1] == "/tmp/it's here"
    assert words[-4:] == ["env", "V=a 'b' $c", "echo", "$HOME;"]
    assert ssh_exec.ssh_base() == ["ssh", "-o", "BatchMode=yes", "-o",
                                   "StrictHostKeyChecking=accept-new"]


def test_ssh_host_key_checking_flag():
    """Host keys are checked by default (accept-new); --ssh-host-key-checking changes it."""
    assert launch.parse_args(["-np", "1", "true"]).ssh_host_key_checking == "accept-new"
    for value in ("yes", "no"):
        args = ["-np", "2", "-H", "localhost:1,node2:1", "--ssh-host-key-checking", value]
        specs = _specs(args, ["node2"], {"PATH": "/bin"})
        assert f"StrictHostKeyChecking={value}" in specs[1].argv
        assert not any(a.startswith("StrictHostKeyChecking") for a in specs[0].argv)
    specs = _specs(["-np", "2", "-H", "localhost:1,node2:1"], ["node2"], {"PATH": "/bin"})
    assert "StrictHostKeyChecking=accept-new" in specs[1].argv
    with pytest.raises(SystemExit):
        launch.parse_args(["--ssh-host-key-checking", "maybe", "-np", "1", "true"])
    with pytest.raises(ValueError, match="accept-new"):
        ssh_exec.ssh_base(host_key_checking="off")


def _run_wrapper(command_script, stop_after=None, private=None):
    """Run the remote wrapper with sh locally, as sshd would, feeding it a stdin pipe."""
    remote = ssh_exec.remote_command(os.getcwd(), {"WRAPPED": "yes"},
                                     [sys.executable, "-c", command_script], 1)
    proc = subprocess.Popen(["sh", "-c", remote], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env=child_env())
    proc.stdin.write(ssh_exec.stdin_payload(private or {"HORA_SECRET": "abc"}))
    proc.stdin.flush()
    if stop_after is None:  # stdin stays open: the rank runs to its end
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=30)
        proc.stdin.close()
    else:
        assert proc.stdout.readline().strip() == b"up"
        time.sleep(stop_after)
        proc.stdin.close()
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=30)
    return proc.returncode, out.decode(), err.decode()


def test_remote_wrapper_passes_private_env_and_exit_code():
    code, out, err = _run_wrapper(
        "import os, sys; print(os.environ['WRAPPED'], os.environ['HORA_SECRET']); sys.exit(5)")
    assert (code, out, err) == (5, "yes abc\n", "")


def test_remote_wrapper_stops_rank_when_stdin_closes():
    token = uuid.uuid4().hex
    start = time.monotonic()
    code, _out, _err = _run_wrapper(textwrap.dedent(f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{token}"])
        print("up", flush=True)
        time.sleep(60)
    """), stop_after=0.2)
    assert code == 128 + signal.SIGKILL  # ignored SIGTERM, killed after the 1 s grace
    assert time.monotonic() - start < 10
    assert_no_survivors(token)


# ------------------------------------------------------------------------------------------------
# mpirun command lines


def test_mpirun_flavours():
    assert mpirun.flavour_of("mpirun (Open MPI) 4.1.4\n") == mpirun.OPENMPI
    assert mpirun.flavour_of("HYDRA build details:\n    Version: 4.0\n") == mpirun.MPICH
    assert mpirun.flavour_of("Intel(R) MPI Library for Linux* OS, Version 2021") == mpirun.MPICH
    with pytest.raises(mpirun.MpiError, match="unknown MPI"):
        mpirun.flavour_of("something else 1.0")


def test_mpirun_command_lines():
    host_slots = slots.parse_hosts("h1:2,h2:2")
    variables = {"HORA_RANKS": "x", "HORA_SECRET": "s3", "PATH": "/bin"}
    openmpi = mpirun.mpirun_command(mpirun.OPENMPI, 4, host_slots, variables, ["python", "t.py"],
                                    mpi_args="--oversubscribe")
    assert openmpi == ["mpirun", "--allow-run-as-root", "--tag-output", "-np", "4",
                       "-H", "h1:2,h2:2", "--bind-to", "none", "--map-by", "slot",
                       "-x", "HORA_RANKS", "-x", "HORA_SECRET", "-x", "PATH",
                       "--oversubscribe", "python", "t.py"]
    mpich = mpirun.mpirun_command(mpirun.MPICH, 4, host_slots, variables, ["python", "t.py"])
    assert mpich == ["mpirun", "-l", "-np", "4", "-hosts", "h1:2,h2:2", "-ppn", "2",
                     "-genv", "HORA_RANKS", "x", "-genv", "PATH", "/bin", "python", "t.py"]
    uneven = mpirun.mpirun_command(mpirun.MPICH, 3, slots.parse_hosts("h1:2,h2:1"), {}, ["t"])
    assert "-ppn" not in uneven
    bound = mpirun.mpirun_command(mpirun.OPENMPI, 2, host_slots, {}, ["t"],
                                  binding_args="-bind-to core")
    assert bound[7:10] == ["-bind-to", "core", "t"]


def test_mpirun_reaches_other_hosts_with_horaruns_ssh_options():
    args = launch.parse_args(["--mpi", "-p", "2222", "-i", "/k", "cmd"])
    options = mpirun.ssh_options(args)
    assert options == ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
                       "-p", "2222", "-i", "/k"]
    assert mpirun.ssh_options(launch.parse_args(["--mpi", "cmd"])) == []
    argv = mpirun.mpirun_command(mpirun.OPENMPI, 2, slots.parse_hosts("h1:1,h2:1"), {}, ["t"],
                                 ssh_options=options)
    at = argv.index("plm_rsh_args")
    assert argv[at - 1:at + 2] == ["--mca", "plm_rsh_args", " ".join(options)]
    assert mpirun.mpirun_env(mpirun.OPENMPI, options) == {}
    # Hydra takes them from its environment, and launches over ssh even under a resource manager.
    hydra = mpirun.mpirun_command(mpirun.MPICH, 2, slots.parse_hosts("h1:1,h2:1"), {}, ["t"],
                                  ssh_options=options)
    assert hydra[-3:] == ["-launcher", "ssh", "t"]
    assert mpirun.mpirun_env(mpirun.MPICH, options) == {
        "HYDRA_LAUNCHER_EXTRA_ARGS": " ".join(options)}
    assert "-launcher" not in mpirun.mpirun_command(mpirun.MPICH, 2, slots.parse_hosts("h1:1"),
                                                    {}, ["t"])
    assert mpirun.mpirun_env(mpirun.MPICH, []) == {}


def test_mpirun_refuses_ssh_options_that_hydra_would_split():
    options = mpirun.ssh_options(launch.parse_args(["--mpi", "-i", "/my keys/k", "cmd"]))
    with pytest.raises(mpirun.MpiError, match="splits the ssh options at spaces.*'/my keys/k'"):
        mpirun.mpirun_command(mpirun.MPICH, 2, slots.parse_hosts("h1:1,h2:1"), {}, ["t"],
                              ssh_options=options)
    with pytest.raises(mpirun.MpiError, match="splits the ssh options at spaces"):
        mpirun.mpirun_env(mpirun.MPICH, options)
    # Open MPI takes them as one shell-quoted value.
    argv = mpirun.mpirun_command(mpirun.OPENMPI, 2, slots.parse_hosts("h1:1"), {}, ["t"],
                                 ssh_options=options)
    assert argv[argv.index("plm_rsh_args") + 1].endswith("-i '/my keys/k'")


def test_mpirun_rank_env():
    args = launch.parse_args(["--mpi", "--cycle-time-ms", "3", "-x", "FOO", "cmd"])
    local = mpirun.rank_env(args, slots.parse_hosts("localhost:2"),
                            {"FOO": "f", "HORA_X": "1", "HOME": "/h", "HORA_SECRET": "old",
                             "PYTHONPATH": "/p"})
    assert local["HORA_CONTROLLER"] == "mpi" and local["HORA_CYCLE_TIME"] == "3"
    assert local["FOO"] == "f" and local["HORA_X"] == "1" and "HOME" not in local
    assert local["PYTHONPATH"] == "/p"  # as horarun carries it to ranks it starts over ssh
    assert local["HORA_RENDEZVOUS_ADDR"] == "127.0.0.1" and int(local["HORA_RENDEZVOUS_PORT"]) > 0
    assert len(local["HORA_SECRET"]) == 64
    assert env.undeclared(local, DECLARED + ["X"]) == []


def test_mpi_execs_mpirun_with_the_environment(tmp_path):
    fake = tmp_path / "mpirun"
    fake.write_text(textwrap.dedent("""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi
        echo "argv: $*"
        echo "secret: ${#HORA_SECRET} controller: $HORA_CONTROLLER fusion: $HORA_FUSION_THRESHOLD"
        exit 7
    """))
    fake.chmod(0o755)
    result = horarun(["--mpi", "-np", "2", "--fusion-threshold-mb", "1", "python", "t.py"],
                     PATH=f"{tmp_path}:{os.environ['PATH']}")
    assert result.returncode == 7, result.stderr
    argv = result.stdout.splitlines()[0]
    assert argv.startswith("argv: --allow-run-as-root --tag-output -np 2 -H localhost:2 "
                           "--bind-to none --map-by slot -x ")
    assert argv.endswith(" python t.py")
    assert "-x HORA_SECRET" in argv and "-x HORA_FUSION_THRESHOLD" in argv
    assert result.stdout.splitlines()[1] == "secret: 64 controller: mpi fusion: 1048576"


def test_mpi_without_mpirun_is_a_clear_error(tmp_path):
    result = horarun(["--mpi", "-np", "2", "true"], PATH=str(tmp_path))
    assert result.returncode == 127
    assert "--mpi needs mpirun" in result.stderr


# ------------------------------------------------------------------------------------------------
# -cb


def test_check_build_report():
    text = check_build.report()
    lines = text.splitlines()
    assert lines[0] == f"Hora v{_core.version}:"
    assert lines[2] == "Available Frameworks:"
    assert [line[8:] for line in lines[3:6]] == ["TensorFlow", "PyTorch", "MXNet"]
    torch_found = check_build.framework_available("torch")
    assert lines[4] == f"    [{'X' if torch_found else ' '}] PyTorch"
    assert "Available Controllers:\n    [" + ("X" if _core.mpi_built() else " ") + "] MPI\n" \
        "    [X] Gloo (TCP)\n" in text
    assert "Available Tensor Operations:\n" in text
    assert f"    [{'X' if _core.nccl_built() else ' '}] NCCL\n" in text
    assert not check_build.framework_available("no_such_framework_here")


def test_help_groups_the_flags_and_its_examples_parse():
    text = launch.build_parser().format_help()
    for title in ("processes and hosts:", "remote hosts (ssh):", "transport:",
                  "output and configuration:", "engine settings", "elastic mode", "examples:"):
        assert f"\n{title}" in text, title
    # "  horarun ...  what it does": the command is the text between the runs of two spaces.
    examples = [line.split("  ")[1] for line in launch.EXAMPLES.splitlines()
                if line.startswith("  horarun")]
    assert len(examples) == 7
    for example in examples:
        argv = shlex.split(example.strip())[1:]
        args = launch.parse_args(argv)
        assert args.check_build or args.command[:2] == ["python", "train.py"], example


def test_check_build_reports_versions_and_gpu_support():
    text = check_build.report()
    versions = text[text.index("\nVersions:\n"):text.index("\nGPU tensors:\n")].splitlines()
    assert versions[2:4] == [f"    Python {platform.python_version()}", f"    Hora {_core.version}"]
    torch_version = importlib.metadata.version("torch")
    assert f"    PyTorch {torch_version}" in versions
    gpu_info = _core.gpu_info()
    assert text.endswith("\nGPU tensors:\n    " + check_build.gpu_line(gpu_info) + "\n")
    # The distribution that provides a module, whatever its name.
    found = {"tensorflow": ["no-such-dist", "torch"]}
    assert check_build.framework_version("tensorflow", found) == torch_version
    assert check_build.framework_version("mxnet", found) is None
    assert check_build.versions({})[2:] == ["    TensorFlow: not installed",
                                           "    PyTorch: not installed", "    MXNet: not installed"]
    assert check_build.nccl_version_text(22303) == "2.23.3"
    assert check_build.nccl_version_text(2708) == "2.7.8"
    assert check_build.gpu_line({"available": False, "reason": "no device"}) == \
        "not available: no device"
    assert check_build.gpu_line({"available": True, "nccl_version": 21903, "nccl_library": "n.so",
                                 "cuda_library": "c.so", "devices": 2}) == \
        "NCCL 2.19.3 (n.so), CUDA runtime (c.so), 2 device(s)"


def test_python_m_hora_prints_the_version_and_the_report():
    def hora_main(*args):
        code = ("import sys; from hora.__main__ import main; rc = main(sys.argv[1:]); "
                "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules; "
                "sys.exit(rc)")
        return subprocess.run([sys.executable, "-c", code, *args], env=child_env(),
                              capture_output=True, text=True, timeout=60, check=False)

    version = hora_main("--version")
    assert version.returncode == 0 and version.stdout == f"hora {_core.version}\n", version.stderr
    for args in ((), ("--check-build",), ("-cb",)):
        report = hora_main(*args)
        assert report.returncode == 0, report.stderr
        assert report.stdout.startswith(f"Hora v{_core.version}:\n\nAvailable Frameworks:\n")
        assert "\nVersions:\n" in report.stdout and "\nGPU tensors:\n" in report.stdout
    both = hora_main("--version", "--check-build")
    assert both.stdout.startswith(f"hora {_core.version}\nHora v{_core.version}:\n")
    module = subprocess.run([sys.executable, "-m", "hora", "--version"], env=child_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert module.stdout == f"hora {_core.version}\n", module.stderr


def test_check_build_flag_does_not_import_tensorflow():
    code = ("import sys; from hora.runner.launch import main; rc = main(['-cb']); "
            "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules; sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Hora v{_core.version}:\n\nAvailable Frameworks:\n")


# ------------------------------------------------------------------------------------------------
# Running jobs on this host


def test_prefix_sink_and_file_sink(tmp_path):
    class Buffer:
        def __init__(self):
            self.data = b""

        def write(self, b):
            self.data += b

        def flush(self):
            pass

    out, err = Buffer(), Buffer()
    sink = output.PrefixSink(out, err)
    sink.line(3, "stdout", b"hello\n")
    sink.line(3, "stderr", b"partial")
    assert (out.data, err.data) == (b"[3]<stdout>:hello\n", b"[3]<stderr>:partial\n")
    files = output.FileSink(str(tmp_path / "logs"), 2)
    files.line(1, "stdout", b"a\n")
    files.line(1, "stdout", b"b")
    files.close()
    assert (tmp_path / "logs" / "rank.1" / "stdout").read_bytes() == b"a\nb"
    assert (tmp_path / "logs" / "rank.0" / "stderr").read_bytes() == b""


def test_output_filename_writes_per_rank_files(tmp_path):
    result = horarun(["-np", "2", "--output-filename", str(tmp_path / "out")], """
        import os, sys
        print("out of", os.environ["HORA_RANK"])
        print("err of", os.environ["HORA_RANK"], file=sys.stderr)
    """)
    assert result.returncode == 0, result.stderr
    assert "<stdout>" not in result.stdout
    for rank in range(2):
        rank_dir = tmp_path / "out" / f"rank.{rank}"
        assert (rank_dir / "stdout").read_text() == f"out of {rank}\n"
        assert (rank_dir / "stderr").read_text() == f"err of {rank}\n"


def test_settings_and_exports_reach_local_ranks():
    result = horarun(["-np", "2", "--cycle-time-ms", "4", "--log-without-timestamp", "-x",
                      "GREETING=hi", "--verbose"], """
        import os
        keys = ["HORA_CYCLE_TIME", "HORA_LOG_HIDE_TIME", "GREETING", "HORA_IFACE"]
        print(" ".join(os.environ.get(k, "-") for k in keys), len(os.environ["HORA_SECRET"]))
        print("secret", os.environ["HORA_SECRET"])
    """)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        assert f"[{rank}]<stdout>:4 1 hi lo 64\n" in result.stdout
    assert "horarun: rank 1 on localhost (local; local 1/2, cross 0/1)" in result.stderr
    secret = result.stdout.split("<stdout>:secret ")[1].split()[0]
    assert len(secret) == 64 and secret not in result.stderr


def test_fail_fast_leaves_no_survivors():
    token = uuid.uuid4().hex
    start = time.monotonic()
    result = horarun(["-np", "3"], f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{token}"])
        if os.environ["HORA_RANK"] == "1":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(60)
    """)
    assert result.returncode == 3
    assert time.monotonic() - start < 15
    assert "rank 1 exited with exit code 3" in result.stderr
    assert "rank 1 was the first" in result.stderr
    assert_no_survivors(token)


def test_sigint_stops_every_rank():
    token = uuid.uuid4().hex
    command = [sys.executable, "-m", "hora.runner", "-np", "2", sys.executable, "-c",
               "import time; print('up', flush=True); time.sleep(60)", token]
    # The child only sets a disposition before exec, which no lock of another thread can block.
    proc = subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)  # noqa: PLW1509
    seen = 0
    while seen < 2:
        line = proc.stdout.readline()
        assert line, "launcher ended early"
        seen += "up" in line
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGINT
    assert "SIGINT" in err
    assert_no_survivors(token)


def test_unwritable_output_directory_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = horarun(["-np", "1", "--output-filename", str(blocker / "out"), "true"])
    assert result.returncode == 2
    assert "cannot write output files" in result.stderr


def test_unknown_interface_is_a_usage_error():
    result = horarun(["-np", "1", "--network-interface", "nosuchif0", "true"])
    assert result.returncode == 2
    assert "nosuchif0" in result.stderr


# ------------------------------------------------------------------------------------------------
# hora.run


def test_hora_run_returns_per_rank_results(capfd, monkeypatch):
    def rank_info(offset, scale=1):  # nested: cloudpickle sends it by value
        import hora
        import numpy as np

        hora.init()
        total = hora.allreduce(np.array([hora.rank() + offset]), op=hora.Sum)
        print("from rank", hora.rank())
        result = (hora.rank(), hora.size(), int(total[0]) * scale)
        hora.shutdown()
        return result

    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    results = hora.run(rank_info, args=(10,), kwargs={"scale": 2}, num_proc=3)
    assert results == [(0, 3, 66), (1, 3, 66), (2, 3, 66)]
    out = capfd.readouterr().out
    assert "[2]<stdout>:from rank 2" in out


def test_hora_run_raises_when_a_rank_fails(capfd, monkeypatch):
    def fails_on_rank_one():
        import os
        import time

        if os.environ["HORA_RANK"] == "1":
            raise ValueError("rank one refuses")
        time.sleep(60)

    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 failed with exit code 1"):
        hora.run(fails_on_rank_one, num_proc=2)
    assert time.monotonic() - start < 20
    assert "ValueError: rank one refuses" in capfd.readouterr().err


def test_hora_run_rejects_mpi_and_bad_hosts():
    with pytest.raises(hora.NotSupportedError):
        hora.run(print, use_mpi=True)
    with pytest.raises(ValueError, match="cannot place 3"):
        hora.run(print, num_proc=3, hosts="localhost:2")
    with pytest.raises(ValueError, match="cannot place 4"):
        hora.run(print, num_proc=4, hosts="localhost:2")


def test_run_from_hora_runner_takes_horovod_s_arguments_in_horovod_s_order(monkeypatch):
    import inspect

    from hora.runner import run

    horovod_order = ["func", "args", "kwargs", "num_proc", "min_num_proc", "max_num_proc",
                     "slots", "reset_limit", "cooldown_range", "hosts", "hostfile",
                     "start_timeout", "ssh_port", "ssh_identity_file", "disable_cache",
                     "output_filename", "verbose", "use_gloo", "use_mpi", "mpi_args",
                     "network_interface", "executable", "np", "min_np", "max_np"]
    assert list(inspect.signature(run).parameters)[:len(horovod_order)] == horovod_order
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    with pytest.warns(DeprecationWarning, match="np is deprecated, use num_proc instead"):
        assert run(lambda: 1, np=2) == [1, 1]
    assert run(lambda a, b=0: a + b, (1,), {"b": 2}, 2) == [3, 3]


def test_run_commandline_is_horovod_s_name_for_the_launcher(capsys):
    from hora.runner.launch import main, run_commandline

    assert run_commandline is main
    assert run_commandline(["-cb"]) == 0
    assert "Available Frameworks" in capsys.readouterr().out


def test_run_refuses_elastic_jobs_and_contradictory_choices():
    from hora.runner import run

    with pytest.raises(hora.NotSupportedError, match="min_num_proc ask for an elastic job"):
        run(print, num_proc=2, min_num_proc=1)
    with pytest.raises(ValueError, match="hosts and hostfile"):
        run(print, hosts="localhost:1", hostfile="hosts.txt")
    with pytest.raises(ValueError, match="use_gloo and use_mpi"):
        run(print, use_gloo=True, use_mpi=True)


def test_task_codec():
    blob = os.urandom(300_000)
    variables = task.encode_task(blob)
    assert int(variables["HORARUN_TASK_CHUNKS"]) == 5  # 400000 base64 characters
    assert all(len(v) <= task.CHUNK_BYTES for v in variables.values())
    environ = dict(variables, OTHER="1")
    assert task.take_task(environ) == blob
    assert environ == {"OTHER": "1"}
    assert task.take_task({}) is None
    with pytest.raises(ValueError, match="at most"):
        task.encode_task(b"x" * (task.MAX_REMOTE_TASK_BYTES + 1))


def test_namespace_has_every_setting_dest():
    args = launch.parse_args(["cmd"])
    assert isinstance(args, argparse.Namespace)
    for setting in env.SETTINGS:
        assert hasattr(args, setting.dest)
