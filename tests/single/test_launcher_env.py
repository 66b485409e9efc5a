"""horarun: the environment each rank sees beyond Hora's own variables: horovodrun's
HOROVOD_* topology names, the default OMP_NUM_THREADS and the binding of local ranks to CPUs
(--bind-to auto, core, none).
Only loopback addresses are used (a documentation address is named, never reached)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap

import hora
from hora.runner import env, job, launch, slots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hora.__file__)))
TOPOLOGY = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME")


def _child_env(**extra):
    result = dict(os.environ)
    result["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [result.get("PYTHONPATH")] if p])
    for key in [k for k in result if k.startswith(("HORA_", "HOROVOD_", "HORARUN_"))]:
        del result[key]
    result.pop("OMP_NUM_THREADS", None)
    result.update(extra)
    return result


def _horarun(args, script, **extra_env):
    command = [sys.executable, "-m", "hora.runner", *args, sys.executable, "-c",
               textwrap.dedent(script)]
    return subprocess.run(command, env=_child_env(**extra_env), capture_output=True, text=True,
                          timeout=60, check=False)


def _specs(args_list, remote, base):
    args = launch.parse_args([*args_list, "python", "t.py"])
    plan = launch.plan(args.num_proc, args.hosts, args.hostfile)
    rendezvous = job.Rendezvous("0.0.0.0", "10.1.2.3", "eth9")
    return job.build_specs(args, args.command, plan, remote, rendezvous, 4242, "s3cret", base,
                           cwd="/w")


def test_topology_env_has_horovod_names():
    plan = slots.assign_slots([slots.HostSlots("a", 2), slots.HostSlots("b", 2)], 4)
    for slot in plan:
        values = env.topology_env(slot)
        expected = (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.cross_rank,
                    slot.cross_size, slot.hostname)
        for name, value in zip(TOPOLOGY, expected):
            assert values["HORA_" + name] == values["HOROVOD_" + name] == str(value)


def test_local_and_remote_ranks_get_horovod_names():
    base = {"PATH": "/bin", "HOROVOD_RANK": "7", "HOROVOD_SIZE": "9"}  # stale: overridden
    specs = _specs(["-np", "3", "-H", "localhost:2,node2:1"], ["node2"], base)
    local = specs[1].env
    assert (local["HOROVOD_RANK"], local["HOROVOD_SIZE"], local["HOROVOD_LOCAL_RANK"],
            local["HOROVOD_LOCAL_SIZE"], local["HOROVOD_CROSS_RANK"],
            local["HOROVOD_CROSS_SIZE"], local["HOROVOD_HOSTNAME"]) == (
                "1", "3", "1", "2", "0", "1", "localhost")
    words = shlex.split(specs[2].argv[-1])
    remote = dict(w.split("=", 1) for w in words[words.index("env") + 1:-2])
    assert (remote["HOROVOD_RANK"], remote["HOROVOD_SIZE"], remote["HOROVOD_LOCAL_RANK"],
            remote["HOROVOD_CROSS_RANK"], remote["HOROVOD_HOSTNAME"]) == (
                "2", "3", "0", "1", "node2")


def test_omp_threads_default_is_cores_per_local_rank():
    assert env.omp_threads_env({}, 2, cores=5) == {"OMP_NUM_THREADS": "2"}
    assert env.omp_threads_env({}, 4, cores=2) == {"OMP_NUM_THREADS": "1"}
    assert env.omp_threads_env({}, 1, cores=8) == {"OMP_NUM_THREADS": "8"}
    assert env.omp_threads_env({"OMP_NUM_THREADS": "3"}, 2, cores=8) == {}
    assert env.usable_cores() >= 1


def _cores():
    return sorted(os.sched_getaffinity(0))


def _auto_shares(ranks):
    """What --bind-to auto (the default) gives ``ranks`` local ranks on this machine now."""
    cores = _cores()
    if env.auto_binding_obstacle(cores, ranks, env.pinned_processes(cores)) is not None:
        return None
    return env.core_shares(cores, ranks)


def test_omp_threads_in_rank_specs():
    shares = env.core_shares(_cores(), 2)
    expected = str(len(shares[0]) if shares else max(1, env.usable_cores() // 2))
    unbound = str(max(1, env.usable_cores() // 2))
    specs = _specs(["-np", "2", "--bind-to", "none"], [], {"PATH": "/bin"})
    assert [s.env["OMP_NUM_THREADS"] for s in specs] == [unbound] * 2
    specs = _specs(["-np", "2", "--bind-to", "core"], [], {"PATH": "/bin"})
    assert [s.env["OMP_NUM_THREADS"] for s in specs] == [expected, expected]
    auto = _auto_shares(2)
    specs = _specs(["-np", "2"], [], {"PATH": "/bin"})
    assert [s.env["OMP_NUM_THREADS"] for s in specs] == [str(len(auto[0])) if auto else unbound] * 2
    specs = _specs(["-np", "2"], [], {"PATH": "/bin", "OMP_NUM_THREADS": "5"})
    assert [s.env["OMP_NUM_THREADS"] for s in specs] == ["5", "5"]
    specs = _specs(["-np", "2", "-x", "OMP_NUM_THREADS=6"], [], {"PATH": "/bin"})
    assert [s.env["OMP_NUM_THREADS"] for s in specs] == ["6", "6"]


SHOW = """
    import os
    names = ["HOROVOD_" + n for n in {names}] + ["OMP_NUM_THREADS"]
    print(" ".join(os.environ.get(n, "-") for n in names))
"""


def test_ranks_see_horovod_names_and_omp_threads():
    result = _horarun(["-np", "2"], SHOW.format(names=list(TOPOLOGY)))
    assert result.returncode == 0, result.stderr
    threads = max(1, env.usable_cores() // 2)
    for rank in range(2):
        assert f"[{rank}]<stdout>:{rank} 2 {rank} 2 0 1 localhost {threads}\n" in result.stdout
    assert result.stderr.count(f"setting OMP_NUM_THREADS={threads}") == 1


def test_user_omp_threads_is_respected():
    result = _horarun(["-np", "2"], SHOW.format(names=["RANK"]), OMP_NUM_THREADS="3")
    assert result.returncode == 0, result.stderr
    assert "[0]<stdout>:0 3\n" in result.stdout and "[1]<stdout>:1 3\n" in result.stdout
    assert "OMP_NUM_THREADS" not in result.stderr


def test_one_local_rank_gets_every_core_silently():
    result = _horarun(["-np", "1"], SHOW.format(names=["RANK"]))
    assert result.returncode == 0, result.stderr
    assert f"<stdout>:0 {env.usable_cores()}\n" in result.stdout
    assert "OMP_NUM_THREADS" not in result.stderr


def test_core_shares_split_the_cpus_evenly_in_order():
    assert env.core_shares([0, 1], 2) == [[0], [1]]
    assert env.core_shares(range(8), 3) == [[0, 1], [2, 3, 4], [5, 6, 7]]
    assert env.core_shares([3, 1, 2, 0], 2) == [[0, 1], [2, 3]]
    assert env.core_shares([0, 1], 4) == [[0], [1], [0], [1]]  # 2 ranks per CPU, round robin
    assert env.core_shares([0, 1], 3) is None  # one CPU would carry more ranks: nobody is bound
    assert env.core_shares(range(8), 1) is None
    assert env.cpu_list([8, 0, 1, 2, 5, 7]) == "0-2,5,7-8"


def test_rank_specs_bind_every_local_rank_of_every_local_host_name():
    """Two host names of this machine count together: no two ranks share a CPU."""
    shares = env.core_shares(_cores(), 2)
    specs = _specs(["-H", "localhost:1,127.0.0.1:1", "--bind-to", "core"], [], {"PATH": "/bin"})
    assert [s.cpus for s in specs] == (shares or [None, None])
    specs = _specs(["-np", "3", "-H", "localhost:2,node2:1", "--bind-to", "core"], ["node2"],
                   {"PATH": "/bin"})
    assert [s.cpus for s in specs] == [*(env.core_shares(_cores(), 2) or [None, None]), None]
    specs = _specs(["-np", "2", "--bind-to", "none"], [], {"PATH": "/bin"})
    assert [s.cpus for s in specs] == [None, None]
    specs = _specs(["-np", "2"], [], {"PATH": "/bin"})  # --bind-to auto
    assert [s.cpus for s in specs] == (_auto_shares(2) or [None, None])


AFFINITY = """
    import os
    print(sorted(os.sched_getaffinity(0)), os.environ["OMP_NUM_THREADS"])
"""


def test_local_ranks_run_on_their_own_share_of_the_cpus():
    cores = _cores()
    shares = env.core_shares(cores, 2)
    result = _horarun(["-np", "2", "--bind-to", "core"], AFFINITY)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        cpus = shares[rank] if shares else cores
        threads = len(cpus) if shares else max(1, len(cores) // 2)
        assert f"[{rank}]<stdout>:{cpus} {threads}\n" in result.stdout
    assert ("binding each of the 2 ranks on this machine" in result.stderr) == bool(shares)


def test_oversubscribed_ranks_share_cpus_round_robin():
    cores = _cores()
    result = _horarun(["--bind-to", "core", "-np", str(2 * len(cores))], AFFINITY)
    assert result.returncode == 0, result.stderr
    for rank in range(2 * len(cores)):
        assert f"[{rank}]<stdout>:[{cores[rank % len(cores)]}] 1\n" in result.stdout
    assert f"binding the {2 * len(cores)} ranks on this machine 2 to a CPU" in result.stderr


def test_unbound_with_bind_to_none_and_with_uneven_ranks_per_cpu():
    cores = _cores()
    for args in (["--bind-to", "none", "-np", "2"], ["--bind-to", "core", "-np", str(len(cores) + 1)],
                 ["-np", str(len(cores) + 1)]):
        result = _horarun(args, AFFINITY)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count(f"{cores} ") == int(args[-1])
        assert "horarun: binding" not in result.stderr
    # --bind-to auto says why it leaves them unbound.
    assert (f"horarun: not binding the ranks to CPUs: {len(cores) + 1} ranks on {len(cores)} CPUs;"
            in result.stderr)


def test_auto_binding_binds_like_core_when_nothing_else_is_pinned():
    """Two ranks on two CPUs or more are bound as --bind-to core binds them, unless another
    process is pinned to some of the CPUs. Other tests run beside this one (pytest -n) and pin
    ranks of their own now and then, so whether one was pinned at the moment horarun looked is
    taken from what horarun says: it bound the ranks, or it names the pinned process that kept
    it from doing so, never another reason."""
    cores = _cores()
    shares = env.core_shares(cores, 2)
    result = _horarun(["-np", "2"], AFFINITY)
    assert result.returncode == 0, result.stderr
    bound = "horarun: binding each of the 2 ranks on this machine" in result.stderr
    for rank in range(2):
        cpus = shares[rank] if bound else cores
        assert f"[{rank}]<stdout>:{cpus} " in result.stdout
    if shares is not None and not bound:
        assert "horarun: not binding the ranks to CPUs: process " in result.stderr, result.stderr


def test_auto_binding_leaves_ranks_unbound_beside_a_pinned_process():
    """Another job's bound rank on the CPUs: binding this job's ranks would stack them on it."""
    cores = _cores()
    if len(cores) < 2:
        return  # one CPU: two ranks are never bound by auto; the test above covers it
    pinned = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              preexec_fn=lambda: os.sched_setaffinity(0, {cores[0]}))  # noqa: PLW1509
    try:
        found = env.pinned_processes(cores)
        assert (pinned.pid, "python3", [cores[0]]) in [(p, n[:7], c) for p, n, c in found]
        result = _horarun(["-np", "2"], AFFINITY)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count(f"{cores} ") == 2
        assert "horarun: not binding the ranks to CPUs: process " in result.stderr
        assert f"is bound to CPUs {cores[0]};" in result.stderr
    finally:
        pinned.kill()
        pinned.wait()


def test_pinned_processes_reads_proc(tmp_path):
    def process(pid, name, cpus, cmdline=b"x\0"):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
        (tmp_path / str(pid) / "status").write_text(
            f"Name:\t{name}\nState:\tS (sleeping)\nCpus_allowed_list:\t{cpus}\n")

    process(10, "rank0", "0")
    process(11, "free", "0-3")
    process(12, "kworker/0:1", "0", cmdline=b"")  # a kernel thread
    process(13, "elsewhere", "4-7")
    process(14, "half", "2-5")
    (tmp_path / "self").mkdir()
    assert env.pinned_processes([0, 1, 2, 3], str(tmp_path)) == [
        (10, "rank0", [0]), (14, "half", [2, 3, 4, 5])]
    assert env.parse_cpu_list("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]
    assert env.auto_binding_obstacle([0, 1], 3, []) == "3 ranks on 2 CPUs"
    assert env.auto_binding_obstacle([0, 1], 2, [(10, "rank0", [0])]) == \
        "process 10 (rank0) is bound to CPUs 0"
    assert env.auto_binding_obstacle([0, 1], 2, []) is None


def test_elastic_workers_are_not_bound():
    """An elastic job's ranks come and go, so no share of the CPUs stays a rank's: unbound."""
    from hora.runner.elastic import workers

    info = workers.LaunchInfo(["python", "t.py"], {"PATH": "/bin"}, "s3cret", "127.0.0.1", 4242,
                              None, frozenset(), "/w")
    assert [workers.worker_spec(info, i, "localhost", 2).cpus for i in range(2)] == [None, None]


def test_elastic_remote_workers_do_not_get_the_drivers_interface():
    """The driver's own interface name (``hrbr0``) means nothing on another host: only workers
    on the driver's machine get it; an explicit ``--network-interface`` goes to every worker."""
    from hora.runner.elastic import workers

    def iface(info: workers.LaunchInfo, host: str) -> str | None:
        return workers.worker_env(info, 0, host, 1).get("HORA_IFACE")

    derived = workers.LaunchInfo(["python"], {}, "s", "10.0.0.1", 4242, None,
                                 frozenset({"hostB"}), "/w", local_interface="hrbr0")
    assert (iface(derived, "localhost"), iface(derived, "hostB")) == ("hrbr0", None)
    explicit = workers.LaunchInfo(["python"], {}, "s", "10.0.0.1", 4242, "eth1",
                                  frozenset({"hostB"}), "/w", local_interface="hrbr0")
    assert (iface(explicit, "localhost"), iface(explicit, "hostB")) == ("eth1", "eth1")


def test_an_elastic_host_discovered_after_the_start_is_local_or_remote_by_its_own_name():
    """A discovery script may name a host only later: whether its workers start over ssh (and
    then find their own route to the rendezvous, without the driver's interface name) is decided
    from the host itself, not from the hosts of the first discovery. 192.0.2.7 is a documentation
    address (nothing is sent to it)."""
    from hora.runner.elastic import workers

    info = workers.LaunchInfo(["python"], {}, "s", "10.0.0.1", 4242, None, frozenset({"hostB"}),
                              "/w", local_interface="hrbr0", uses_ssh=True)
    later = workers.worker_spec(info, 5, "192.0.2.7", 2)
    assert later.remote and later.argv[0] == "ssh", later.argv
    assert "HORA_IFACE" not in " ".join(later.argv)
    assert workers.worker_env(info, 5, "192.0.2.7", 2).get("HORA_IFACE") is None
    local = workers.worker_spec(info, 6, "127.0.0.1", 2)
    assert not local.remote and local.env["HORA_IFACE"] == "hrbr0"
    assert workers.unreachable(info, "192.0.2.7") is None


def test_an_elastic_workers_ssh_gives_up_on_a_silent_host_in_bounded_time():
    """A remote worker's ssh client ends (exit 255) after 3 unanswered asks 5 s apart, so a host
    whose network is cut fails its workers (and is blacklisted) even while the discovery script
    still lists it; a static job's ssh has no such option (its ranks notice a lost host
    themselves)."""
    from hora.runner import ssh_exec
    from hora.runner.elastic import workers

    info = workers.LaunchInfo(["python"], {}, "s", "10.0.0.1", 4242, None, frozenset({"hostB"}),
                              "/w", uses_ssh=True)
    argv = workers.worker_spec(info, 0, "hostB", 2).argv
    host = argv.index("hostB")
    assert argv[:host][-4:] == ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    assert not any("ServerAlive" in word for word in ssh_exec.ssh_base())


def test_an_elastic_job_on_the_loopback_starts_no_workers_on_a_remote_host():
    """A job whose first discovery was only this machine serves its stores on 127.0.0.1: a
    remote host discovered later gets no workers (they could not reach the stores), and the
    reason names the way out; Spark and Ray place their own workers and are not asked."""
    from hora.runner.elastic import workers

    info = workers.LaunchInfo(["python"], {}, "s", "127.0.0.1", 4242, None, frozenset(), "/w",
                              local_interface="lo", uses_ssh=True)
    why = workers.unreachable(info, "192.0.2.7")
    assert why is not None and "listens on 127.0.0.1 only" in why and "--network-interface" in why
    assert workers.unreachable(info, "localhost") is None
    placed_elsewhere = workers.LaunchInfo(["a Ray actor"], {}, "s", "127.0.0.1", 4242, None,
                                          frozenset(), "/w")
    assert workers.unreachable(placed_elsewhere, "192.0.2.7") is None


def test_bind_like_horarun_binds_every_thread_of_the_process():
    """What the benchmarks' peers use to run with horarun's binding."""
    script = """
        import os, threading
        from hora.runner.env import bind_like_horarun, core_shares
        cores = sorted(os.sched_getaffinity(0))
        ready = threading.Event()
        threading.Thread(target=ready.wait, daemon=True).start()  # started before the binding
        got = bind_like_horarun(1, 2)
        share = core_shares(cores, 2)
        masks = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")}
        ready.set()
        print(got == (share[1] if share else None), masks == {tuple(share[1] if share else cores)})
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=_child_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True True\n"
