"""Randomized fault scenarios: a rank killed, stopped or cut off, or the launcher killed.

    python tests/chaos/run_chaos.py [--count N] [--seed S | --seeds S1,S2,...] [--jobs J]

Scenario i of a run is drawn from seed S + i alone, so ``--seeds X`` replays scenario X exactly
(the seed of every failure is printed with that command). Each scenario starts a small job of
tests/chaos/worker.py (2 or 3 ranks, small tensors, a small HORA_TIMEOUT_SECONDS) in one of three
ways: under horarun (TCP), as ranks started torchrun-style with no launcher at all (TCP: the
survivors must notice the failure on their own), or under mpirun (MPI, or negotiation and
collectives on different transports: mpi+tcp, tcp+mpi). Then one of:

* kill: the victim rank SIGKILLs itself at a point (rendezvous, negotiation, mid-collective, in a
  batch of fused ops, shutdown) after a random delay (under mpirun, not during the rendezvous:
  see draw());
* stop: the victim (any rank, the coordinator included) SIGSTOPs itself while the others wait for
  it (a silent peer); with no stall shutdown set, the survivors must notice the silence on their
  own (control-channel heartbeats) and fail within about HORA_TIMEOUT_SECONDS;
* cut: HORA_FAULT_INJECT cuts one of the victim's connections after a random number of bytes
  (with HORA_SHM_DISABLE=1, so that the collectives too travel over TCP);
* optimizer: hora.torch.DistributedOptimizer trains a small model (torchrun-style, TCP) and the
  victim SIGKILLs itself mid-training; each survivor whose step failed must still have the
  parameters it had before that step;
* launcher: horarun (or mpirun) is killed with SIGKILL while its ranks sleep or wait in a
  collective; they must all be gone within LAUNCHER_DEATH_BOUND_SECONDS.

Every scenario asserts: the job ends within its bound; the outcome names the victim rank (the
launcher's report, mpirun's, or every survivor's error); no result is ever wrong; ranks that saw
the failure hold no socket after hora.shutdown(); and no process of the job (found by a unique
environment marker) is left once the job ended. Exit status 0 when every scenario passed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"
TORCH_WORKER = HERE / "torch_worker.py"
OPS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
KILL_POINTS = ("rendezvous", "negotiation", "mid", "fusion", "shutdown")
TIMEOUT_SECONDS = 3  # HORA_TIMEOUT_SECONDS of every job: the bound on a silent peer
JOB_BOUND_SECONDS = 60.0  # a job still running after this is a hang
ORPHAN_BOUND_SECONDS = 15.0  # how long after the job's end its processes may take to go
LAUNCHER_DEATH_BOUND_SECONDS = 15.0  # ranks must be gone this soon after horarun's SIGKILL


@dataclasses.dataclass
class Scenario:
    """One randomized scenario, a pure function of its seed."""

    seed: int
    kind: str  # kill | stop | cut | launcher
    mode: str  # horarun | direct | mpirun
    np: int
    op: str
    point: str
    victim: int
    step: int
    delay: float
    elems: int
    steps: int
    cut_bytes: int = -1
    pair: str = "mpi+mpi"  # mpirun: transport of negotiation + transport of collectives

    def describe(self) -> str:
        text = (f"seed={self.seed} {self.kind}/{self.point} {self.mode} np={self.np} op={self.op} "
                f"victim={self.victim} step={self.step} delay={self.delay:.3f}s elems={self.elems}")
        text += f" {self.pair}" if self.mode == "mpirun" else ""
        return text + (f" cut_after={self.cut_bytes}B" if self.kind == "cut" else "")


def draw(seed: int, mpi: bool, torch: bool = True) -> Scenario:
    """The scenario of ``seed`` (MPI scenarios only when ``mpi``; optimizer only when ``torch``,
    else a kill)."""
    rng = random.Random(seed)
    kind = rng.choices(("kill", "stop", "cut", "launcher", "optimizer"),
                       weights=(52, 12, 23, 8, 5))[0]
    if kind == "optimizer" and not torch:
        kind = "kill"
    if kind == "optimizer":
        np_ = rng.choice((2, 3))
        return Scenario(seed, kind, "direct", np_, "torch", "backward", rng.randrange(np_),
                        rng.randrange(3), rng.uniform(0.0, 0.1), 0, 300)
    if kind == "launcher":
        modes = ["horarun", "horarun"] + (["mpirun"] if mpi else [])
    else:
        modes = ["horarun", "direct"] + (["mpirun"] if mpi and kind == "kill" else [])
    mode = rng.choice(modes)
    np_ = rng.choice((2, 3))
    op = rng.choice(OPS)
    steps = 3
    elems = rng.choice((1, 17, 1024))
    if kind == "kill":
        # Under mpirun a rank killed this early dies inside MPI's own start-up (MPI_Init and the
        # first blocking MPI calls), where Open MPI 4.1's mpirun was seen to hang: its PMIx server
        # reported the dead rank UNREACHABLE and never ended the job. mpirun scenarios kill from
        # negotiation on; horarun and direct scenarios still kill during the rendezvous.
        points = [p for p in KILL_POINTS if p != "rendezvous"] if mode == "mpirun" else KILL_POINTS
        point = rng.choice(points)
        delay = rng.uniform(0.0, 0.3) if point == "rendezvous" else rng.uniform(0.0, 0.02)
        if point == "mid":
            elems = rng.choice((1 << 16, 1 << 18))  # long enough for a kill to land inside
    elif kind == "stop":
        point, delay = "stop", rng.uniform(0.0, 0.2)
    elif kind == "cut":
        point, delay = "none", 0.0
    else:
        point, delay = "launcher", 0.0
    victim = rng.randrange(np_)
    if kind == "launcher" and rng.random() < 0.3:
        victim = -1  # every rank idles instead of one sleeping while the others wait
    scenario = Scenario(seed, kind, mode, np_, op, point, victim, rng.randrange(steps), delay,
                        elems, steps)
    if mode == "mpirun":
        scenario.pair = rng.choice(("mpi+mpi", "mpi+mpi", "mpi+tcp", "tcp+mpi"))
    if kind == "cut":
        scenario.cut_bytes = rng.choice((rng.randrange(0, 512), rng.randrange(512, 64 << 10)))
    return scenario


def horarun_argv() -> list[str]:
    beside = Path(sys.executable).parent / "horarun"
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-m", "hora.runner"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(s: Scenario, marker: str) -> dict[str, str]:
    drop = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_", "CHAOS_")
    names = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in names}
    env.update(
        CHAOS_MARK=marker, CHAOS_OP=s.op, CHAOS_POINT=s.point, CHAOS_VICTIM=str(s.victim),
        CHAOS_STEP=str(s.step), CHAOS_DELAY=f"{s.delay:.4f}", CHAOS_ELEMS=str(s.elems),
        CHAOS_STEPS=str(s.steps), CHAOS_HOLD="60", HORA_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS),
        HORA_START_TIMEOUT="10",
        PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
    )
    if s.kind == "cut":
        env["HORA_FAULT_INJECT"] = f"close_after_bytes={s.cut_bytes},rank={s.victim}"
        # The hook cuts TCP connections: keep the collectives on TCP so it can hit them too (kills
        # and stops run over shared memory, the default on one host).
        env["HORA_SHM_DISABLE"] = "1"
    return env


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment holds CHAOS_MARK=marker (zombies have none)."""
    needle = f"CHAOS_MARK={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            pass
    return found


def wait_gone(marker: str, bound: float) -> list[int]:
    """Polls until no process carries ``marker`` (returns []) or ``bound`` passed (returns them,
    after killing them so that one failure does not disturb the next scenarios)."""
    deadline = time.monotonic() + bound
    while True:
        left = marked_pids(marker)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


class Reader:
    """Collects a process's output lines on a thread; lets a caller wait for a line count."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream) -> None:  # type: ignore[no-untyped-def]
        for line in iter(stream.readline, ""):
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, pattern: str, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            # Occurrences, not lines: mpirun may join two ranks' lines into one.
            while sum(line.count(pattern) for line in self.lines) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def text(self, timeout: float = 5.0) -> str:
        self._thread.join(timeout)
        with self._cond:
            return "\n".join(self.lines)


def spawn(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, Reader]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                            errors="replace")
    return proc, Reader(proc.stdout)


def wait_process(proc: subprocess.Popen, bound: float) -> bool:
    """Whether ``proc`` ended within ``bound`` seconds."""
    try:
        proc.wait(timeout=bound)
        return True
    except subprocess.TimeoutExpired:
        return False


def run_one(s: Scenario, mpirun: str | None) -> list[str]:
    """Runs scenario ``s``; returns what went wrong (empty when it passed) and, last, the output."""
    if s.mode != "mpirun":
        return _run_job(s, mpirun, None)
    # Open MPI 4 keeps its shared-memory files in /dev/shm, and a killed job's stay there (4 MiB
    # of memory each): this job's go with the scenario.
    shm_dir = tempfile.mkdtemp(prefix="hora-chaos-mpi.",
                               dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        return _run_job(s, mpirun, shm_dir)
    finally:
        shutil.rmtree(shm_dir, ignore_errors=True)


def _run_job(s: Scenario, mpirun: str | None, shm_dir: str | None) -> list[str]:
    marker = uuid.uuid4().hex
    env = base_env(s, marker)
    worker = [sys.executable, str(TORCH_WORKER if s.kind == "optimizer" else WORKER)]
    problems: list[str] = []
    procs: list[subprocess.Popen] = []
    readers: list[Reader] = []
    start = time.monotonic()
    if s.mode == "direct":
        port = _free_port()
        for r in range(s.np):
            renv = dict(env, RANK=str(r), WORLD_SIZE=str(s.np), LOCAL_RANK=str(r),
                        LOCAL_WORLD_SIZE=str(s.np), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), HORA_RENDEZVOUS_PORT=str(port),
                        HORA_SECRET=marker)
            proc, reader = spawn(worker, renv)
            procs.append(proc)
            readers.append(reader)
    elif s.mode == "mpirun":
        assert mpirun is not None
        controller, operations = s.pair.split("+")
        env.update(HORA_CONTROLLER=controller, HORA_CPU_OPERATIONS=operations,
                   OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                   OMPI_MCA_btl_vader_backing_directory=shm_dir or "/dev/shm")
        argv = [mpirun, "--bind-to", "none", "-np", str(s.np), "-x", "CHAOS_MARK", *worker]
        proc, reader = spawn(argv, env)
        procs.append(proc)
        readers.append(reader)
    else:
        proc, reader = spawn([*horarun_argv(), "-np", str(s.np), *worker], env)
        procs.append(proc)
        readers.append(reader)

    if s.kind == "launcher":
        waiting = "BLOCKING" if s.victim >= 0 else "HOLDING"
        got_going = readers[0].wait_for(waiting, 1 if s.victim >= 0 else s.np, JOB_BOUND_SECONDS)
        if not got_going:
            problems.append(f"the ranks never reached {waiting}")
        else:
            time.sleep(random.Random(s.seed).uniform(0.0, 0.5))  # the others enter the op
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        left = wait_gone(marker, LAUNCHER_DEATH_BOUND_SECONDS)
        if left:
            problems.append(f"{len(left)} processes of the job still ran "
                            f"{LAUNCHER_DEATH_BOUND_SECONDS:.0f} s after the launcher was killed")
        return problems + ["\n".join(r.text() for r in readers)]

    # A stopped victim without a launcher stays stopped: nobody is there to end it.
    watched = [i for i in range(len(procs))
               if not (s.kind == "stop" and s.mode == "direct" and i == s.victim)]
    hung = [i for i in watched
            if not wait_process(procs[i], max(0.1, JOB_BOUND_SECONDS - (time.monotonic() - start)))]
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    outputs = [r.text() for r in readers]
    output = "\n".join(f"--- process {i} (exit {p.returncode}) ---\n{o}"
                       for i, (p, o) in enumerate(zip(procs, outputs)))
    if hung:
        problems.append(f"still running after {JOB_BOUND_SECONDS:.0f} s (processes {hung}): HANG")
    problems += _check_outcome(s, procs, outputs, output)
    left = wait_gone(marker, ORPHAN_BOUND_SECONDS)
    if left:
        problems.append(f"{len(left)} processes left behind after the job ended: {left}")
    return problems + [output]


def _names(error: str, victim: int) -> bool:
    """Whether a survivor's error names the victim among the ranks it lost or waited for ("rank 1",
    "rank(s) 0, 1", "missing ranks [1]", "ranks [1] published no agreement round"). A rank whose
    rendezvous store failed names the store's owner ("served by rank 0": the victim, when rank 0
    died) and the ranks it was waiting for."""
    for m in re.finditer(r"\brank(?:\(s\)|s)? (\d+(?:, \d+)*)", error):
        if victim in (int(r) for r in m.group(1).split(", ")):
            return True
    return re.search(rf"\branks \[[^\]]*\b{victim}\b", error) is not None


def _check_outcome(s: Scenario, procs: list[subprocess.Popen], outputs: list[str],
                   output: str) -> list[str]:
    problems = []
    if "WRONG-RESULT" in output:
        problems.append("a rank got a wrong result")
    for m in re.finditer(r"SOCKETS rank=(\d+) left=(\d+) listening=(\d+) store=(\d+)", output):
        rank, left, listening, store = (int(x) for x in m.groups())
        if left > 0:
            problems.append(f"rank {rank} holds {left} connections after shutdown")
        if listening > (1 if rank == 0 and s.mode == "mpirun" else 0):  # mpirun: rank 0's store
            problems.append(f"rank {rank} still listens on {listening} sockets after shutdown")
        if store > 0 and not (rank == 0 and s.mode == "direct"):
            problems.append(f"rank {rank} holds {store} sockets of a store it does not serve")
    failed_lines = [line for line in output.splitlines() if "FAILED rank=" in line]
    codes = [p.returncode for p in procs]
    if s.kind == "cut":
        if all(c == 0 for c in codes):
            return problems  # the cut came after the job's last byte that mattered
        if not failed_lines:
            problems.append("the job failed but no rank reported a Hora error")
        said = re.search(r"job failed: rank (\d+) was the first", output)
        errors = " ".join(line.split("FAILED", 1)[-1] for line in failed_lines)
        if not (said and int(said.group(1)) == s.victim) and not _names(errors, s.victim):
            problems.append(f"neither the launcher nor an error names rank {s.victim}")
        return problems
    # kill and stop: the victim always acts, so the job must fail and name it.
    v = s.victim
    if "VICTIM-ACTS" not in output:
        problems.append("the victim never acted")
    if s.kind == "optimizer":
        for m in re.finditer(r"PARAMS rank=(\d+) unchanged=(\w+)", output):
            if m.group(2) != "True":
                problems.append(f"rank {m.group(1)}'s parameters changed in the failed step")
    if s.mode == "direct":
        naming = []
        for r, (p, o) in enumerate(zip(procs, outputs)):
            if r == v:
                continue
            if "DONE rank=" in o and p.returncode == 0:
                continue  # finished before the victim acted (a kill at shutdown)
            if p.returncode != 3:
                problems.append(f"survivor rank {r} exited with {p.returncode}, not 3 (failed op)")
            naming.append(_names(o.split("FAILED", 1)[-1], v))
        # Every survivor must name the victim, also one that first sees another survivor's
        # connection close (that survivor failed because of the victim, and closed in turn).
        if not all(naming):
            problems.append(f"not every survivor's error names rank {v}")
        return problems
    if codes[0] == 0:
        problems.append("the launcher exited 0 although a rank died or stopped")
    if s.mode == "mpirun":
        if not re.search(rf"process rank {v}\b", output) and not _names(
                " ".join(failed_lines), v):
            problems.append(f"neither mpirun nor the survivors name rank {v}")
        return problems
    launcher_says = re.search(r"job failed: rank (\d+) was the first", output)
    first = int(launcher_says.group(1)) if launcher_says else None
    if first is None:
        problems.append("the launcher does not say which rank failed first")
    elif first != v:
        named = [line for line in failed_lines if _names(line.split("FAILED", 1)[1], v)]
        if not named:
            problems.append(f"the launcher names rank {first}, and no error names the victim {v}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Runs the scenarios; prints one line per scenario and the failures' output."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, help="first seed (default: random)")
    parser.add_argument("--seeds", help="comma-separated seeds to replay")
    parser.add_argument("--jobs", type=int, default=3, help="scenarios at a time")
    parser.add_argument("--no-mpi", action="store_true", help="no mpirun scenarios")
    parser.add_argument("--show", action="store_true", help="print every job's output")
    parser.add_argument("--no-torch", action="store_true",
                        help="no optimizer scenarios (hora.torch.DistributedOptimizer)")
    args = parser.parse_args(argv)
    if args.seeds:
        seeds = [int(x) for x in args.seeds.split(",")]
    else:
        first = args.seed if args.seed is not None else random.randrange(1, 10**6) * 1000
        seeds = list(range(first, first + args.count))
    mpirun = None if args.no_mpi else shutil.which("mpirun")
    if mpirun is not None:
        code = "import hora, sys; sys.exit(0 if hora.mpi_built() else 1)"
        probe = subprocess.run([sys.executable, "-c", code], check=False, timeout=60)
        mpirun = mpirun if probe.returncode == 0 else None
    print(f"chaos: {len(seeds)} scenarios from seed {seeds[0]}, {args.jobs} at a time, "
          f"MPI {'on' if mpirun else 'off'}", flush=True)
    torch = importlib.util.find_spec("torch") is not None and not args.no_torch
    scenarios = [draw(seed, mpirun is not None, torch) for seed in seeds]
    t0 = time.monotonic()
    failures = []
    lock = threading.Lock()

    def one(s: Scenario) -> None:
        t = time.monotonic()
        result = run_one(s, mpirun)
        if result[:-1] and s.mode == "direct" and "Address already in use" in result[-1]:
            result = run_one(s, mpirun)  # another job took the free port picked for the store
        problems, output = result[:-1], result[-1]
        with lock:
            status = "ok" if not problems else "FAILED: " + "; ".join(problems)
            print(f"[{time.monotonic() - t:5.1f}s] {s.describe()}: {status}", flush=True)
            if problems:
                failures.append((s, problems, output))
            elif args.show:
                print(output, flush=True)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for future in [pool.submit(one, s) for s in scenarios]:
            future.result()
    kinds: dict[str, int] = {}
    for s in scenarios:
        kinds[f"{s.kind}/{s.mode}"] = kinds.get(f"{s.kind}/{s.mode}", 0) + 1
    print(f"chaos: {len(scenarios) - len(failures)} of {len(scenarios)} scenarios passed in "
          f"{time.monotonic() - t0:.0f} s ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    for s, problems, output in failures:
        print(f"\n=== FAILED {s.describe()}\n    " + "\n    ".join(problems))
        print(f"    replay: {sys.executable} {Path(__file__)} --seeds {s.seed}"
              + (" --no-mpi" if mpirun is None else "") + (" --no-torch" if not torch else ""))
        print(output)
    if failures:
        print(f"chaos: failing seeds: {','.join(str(s.seed) for s, _, _ in failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
