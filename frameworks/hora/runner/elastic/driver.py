"""The elastic driver: keeps a job of between ``--min-np`` and ``--max-np`` workers running.

It polls host discovery and starts workers on free slots of usable hosts (up to ``-np`` for
the first generation, then up to ``--max-np``). It forms numbered generations of the job (see
``hora.common.elastic.protocol``) from the workers that are ready (their ``init()`` asked for a
place): the first one once every started worker is ready, a new one at once when a member fails,
a host goes away or a worker asks for a reset, and one when new workers are ready (growth). A
worker that is not ready within ``READY_TIMEOUT_SECONDS`` is stopped and counted as a failure. A host where a worker failed is left out for a cooldown
(``Blacklist``). Below ``--min-np`` for longer than ``--elastic-timeout`` seconds, or past
``--reset-limit`` re-formations, the job ends with a message saying why. Once any worker
exits with 0 no new generation is formed; the job ends when every worker has ended.
"""

from __future__ import annotations

import dataclasses
import queue
import signal
import sys
import time
from collections.abc import Callable, Mapping

from hora import _core
from hora.common.elastic import protocol
from hora.runner.elastic.blacklist import Blacklist
from hora.runner.elastic.placement import place
from hora.runner.elastic.workers import LaunchInfo, Worker, WorkerPool, unreachable
from hora.runner.local_exec import describe_exit, exit_code_of

DISCOVER_HOSTS_FREQUENCY_SECS = 1.0
"""Seconds between host discovery polls (Horovod's name; read at every poll)."""
READY_TIMEOUT_SECONDS = 120.0
_TICK_SECONDS = 0.1


@dataclasses.dataclass
class ElasticLimits:
    """The elastic flags of the command line."""

    min_np: int
    max_np: int | None
    initial_np: int | None
    elastic_timeout: float
    reset_limit: int | None


def say(text: str) -> None:
    print(f"horarun: {text}", file=sys.stderr, flush=True)


def with_names(text: str, names: Mapping[str, str]) -> str:
    """``text`` (a message of the driver) with horarun's flags replaced by the names another
    front end gives them (``{"--min-np": "min_workers", ...}``)."""
    for flag, name in names.items():
        text = text.replace(flag, name)
    return text


class ElasticDriver:
    """Runs one elastic job; ``run()`` returns the launcher's exit code."""

    def __init__(self, info: LaunchInfo, discover: Callable[[], dict[str, int]],
                 limits: ElasticLimits, blacklist: Blacklist, pool: WorkerPool,
                 bind_host: str, control: _core.StoreClient,
                 speaker: Callable[[str], None] = say) -> None:
        self._say = speaker  # where the driver's messages go (horarun's stderr by default)
        self._info = info
        self._discover = discover
        self._limits = limits
        self._blacklist = blacklist
        self._pool = pool
        self._bind_host = bind_host
        self._control = control
        self._hosts: dict[str, int] = {}
        self._generation = -1
        self._members: list[int] = []
        self._ready: set[int] = set()
        self._started_at: dict[int, float] = {}
        self._stores: list[_core.StoreServer] = []
        self._below_min_since: float | None = None
        self._reset_seen = -1  # the generation whose reset request was acted on
        self._finished = False
        self._finishing_generation = -1
        # Why the job fails after a worker finished, and its exit code.
        self._failure: tuple[str, int] | None = None
        self._stop_signal: int | None = None
        self._started = time.monotonic()
        self._unreachable: dict[str, str | None] = {}  # host -> why it takes no workers

    def request_stop(self, signum: int) -> None:
        """Make ``run()`` stop every worker (safe in a signal handler)."""
        self._stop_signal = signum

    def run(self) -> int:
        try:
            return self._loop()
        finally:
            self._pool.close()
            for store in self._stores:
                store.stop()

    def _loop(self) -> int:
        next_discovery = 0.0
        urgent = False  # a member is gone: re-form without waiting for starting workers
        while True:
            if self._stop_signal is not None:
                self._say(f"received {signal.Signals(self._stop_signal).name}; "
                          "stopping all workers")
                return 128 + self._stop_signal
            self._pool.enforce()
            urgent |= self._reap()
            if self._finished:
                if not self._pool.alive():
                    return self._final_code()
                self._stop_unneeded()
                continue
            now = time.monotonic()
            if now >= next_discovery:
                urgent |= self._poll_hosts()
                next_discovery = now + DISCOVER_HOSTS_FREQUENCY_SECS
            try:
                self._start_missing()
            except OSError as exc:
                self._say(f"cannot start {exc.filename or self._info.command[0]!r}: "
                    f"{exc.strerror or exc}")
                return 127
            self._check_ready()
            urgent |= self._reset_requested()
            # No worker at all (no host takes one) counts as below --min-np, too.
            if urgent or self._below_min_since is not None or not self._pool.alive() or \
                    (self._newcomers() and not self._pending()):
                outcome = self._form()
                if outcome is not None:
                    return outcome
                urgent = False

    def _reap(self) -> bool:
        """Handle the workers that exited; True when a member of the generation failed."""
        changed = False
        try:
            worker_id, code = self._pool.exits.get(timeout=_TICK_SECONDS)
        except queue.Empty:
            return False
        while True:
            worker = self._pool.workers[worker_id]
            worker.reaped = True
            self._ready.discard(worker_id)
            if code == 0 and not worker.stopping:
                if not self._finished:
                    self._finishing_generation = self._formed(worker_id)
                    self._say(f"worker {worker_id} finished in generation "
                        f"{self._finishing_generation}; waiting for the others to finish")
                self._finished = True
            elif not worker.stopping:
                if self._finished:
                    why = (f"worker {worker_id} exited with {describe_exit(code)} after "
                           "another worker had finished")
                    self._failure = self._failure or (why, exit_code_of(code))
                else:
                    self._on_failure(worker, describe_exit(code))
                    changed = changed or worker_id in self._members
            try:
                worker_id, code = self._pool.exits.get_nowait()
            except queue.Empty:
                return changed

    def _formed(self, worker_id: int) -> int:
        value = self._control.try_get(protocol.formed_key(str(worker_id)))
        return -1 if value is None else int(value)

    def _waits_after(self, worker_id: int) -> int:
        """The generation a ready worker waits to follow (-1: none yet, or not ready)."""
        value = self._control.try_get(protocol.started_key(str(worker_id)))
        return -1 if value is None else int(value)

    def _stop_unneeded(self) -> None:
        """After a worker finished: stop the workers that are not in the generation it
        finished in (they wait for a generation that will not form). One that left that
        generation to re-form cannot finish: the job fails, naming it."""
        finishing = self._finishing_generation
        deserters = [w for w in self._pool.alive()
                     if finishing >= 0 and self._waits_after(w.id) >= finishing]
        if deserters:
            ids = [w.id for w in deserters]
            self._say(f"stopping workers {ids}: they left generation {finishing}, in which the job "
                "finished, to re-form, and no newer generation can form")
            why = (f"worker(s) {ids} left generation {finishing} after another worker had "
                   "finished in it (to re-form: a collective failed on them, or new workers "
                   "came; did every worker run the same steps?)")
            self._failure = self._failure or (why, 1)
            self._pool.stop(deserters)
        unneeded = [w for w in self._pool.alive()
                    if w not in deserters and self._formed(w.id) != finishing]
        if unneeded:
            self._say(f"stopping workers {[w.id for w in unneeded]}: they are not part of "
                      f"generation {self._finishing_generation}, in which the job finished")
            self._pool.stop(unneeded)

    def _on_failure(self, worker: Worker, what: str) -> None:
        cooldown = self._blacklist.record_failure(worker.host)
        when = "for the rest of the job" if cooldown is None else f"for {cooldown:.1f} s"
        self._say(f"worker {worker.id} on {worker.host} {what}; {worker.host} takes no new "
            f"workers {when}")

    def _final_code(self) -> int:
        if self._failure is None:
            self._say("job finished")
            return 0
        why, code = self._failure
        self._say(f"job failed: {why}")
        return code

    def _poll_hosts(self) -> bool:
        """Refresh the hosts and stop workers on hosts that went away; True when one of them
        was a member."""
        self._hosts = self._discover()
        gone = [w for w in self._pool.alive() if w.host not in self._hosts]
        if not gone:
            return False
        self._say(f"hosts {sorted({w.host for w in gone})} are no longer discovered; stopping "
            f"their workers {[w.id for w in gone]}")
        self._pool.stop(gone)
        return any(w.id in self._members for w in gone)

    def _target(self) -> int:
        cap = self._limits.max_np if self._limits.max_np is not None else sys.maxsize
        if self._generation < 0 and self._limits.initial_np is not None:
            cap = min(cap, self._limits.initial_np)
        return cap

    def _start_missing(self) -> None:
        """Start workers on free slots of usable hosts while fewer than the target run."""
        missing = self._target() - len(self._pool.alive())
        for host, slots in self._hosts.items():
            if not self._blacklist.usable(host) or not self._reachable(host):
                continue
            while missing > 0 and self._pool.count_on(host) < slots:
                worker = self._pool.start(self._info, host, slots)
                self._started_at[worker.id] = time.monotonic()
                missing -= 1

    def _reachable(self, host: str) -> bool:
        """False (said once) for a host whose workers could not reach the driver's stores."""
        if host not in self._unreachable:
            self._unreachable[host] = unreachable(self._info, host)
            if self._unreachable[host] is not None:
                self._say(f"{host} takes no workers: {self._unreachable[host]}")
        return self._unreachable[host] is None

    def _pending(self) -> list[Worker]:
        return [w for w in self._pool.alive() if w.id not in self._ready]

    def _newcomers(self) -> bool:
        return any(w.id in self._ready and w.id not in self._members for w in self._pool.alive())

    def _check_ready(self) -> None:
        """Note the workers that became ready; stop the ones that are not ready in time."""
        late = []
        now = time.monotonic()
        for worker in self._pending():
            if self._control.try_get(protocol.started_key(str(worker.id))) is not None:
                self._ready.add(worker.id)
            elif now - self._started_at.get(worker.id, now) > READY_TIMEOUT_SECONDS:
                late.append(worker)
        if late:
            self._pool.stop(late)
            for worker in late:
                self._on_failure(worker, f"did not call init() within {READY_TIMEOUT_SECONDS:g} s")

    def _reset_requested(self) -> bool:
        if self._generation < 0:
            return False
        if self._reset_seen == self._generation:
            return False
        value = self._control.try_get(protocol.reset_key(self._generation))
        if value is None or int(value) <= 0:
            return False
        self._reset_seen = self._generation
        self._say(f"a worker of generation {self._generation} asked for a reset")
        return True

    def _form(self) -> int | None:
        """Form a new generation of the ready workers when there are enough; the exit code when
        the job must end instead, None otherwise."""
        ready = [w for w in self._pool.alive() if w.id in self._ready]
        if len(ready) < self._limits.min_np:
            return self._below_min(len(ready))
        self._below_min_since = None
        if self._generation >= 0 and self._limits.reset_limit is not None and \
                self._generation >= self._limits.reset_limit:
            self._say(f"job failed: one more re-formation would exceed --reset-limit "
                f"{self._limits.reset_limit}")
            return 1
        target = self._target()
        if ready[target:]:
            self._pool.stop(ready[target:])
        self._publish(ready[:target])
        return None

    def _below_min(self, ready: int) -> int | None:
        now = time.monotonic()
        if self._below_min_since is None:
            self._below_min_since = now
            if self._generation >= 0:
                self._say(f"{ready} worker(s) ready, fewer than --min-np {self._limits.min_np}; "
                    f"waiting up to {self._limits.elastic_timeout:g} s (--elastic-timeout)")
        if now - self._below_min_since < self._limits.elastic_timeout:
            return None
        hosts = ", ".join(f"{h}:{s}{self._unusable(h)}" for h, s in self._hosts.items()) or "none"
        self._say(f"job failed: fewer than --min-np {self._limits.min_np} workers ({ready} "
                  f"ready) for {self._limits.elastic_timeout:g} s (--elastic-timeout); hosts: "
                  f"{hosts}")
        return 1

    def _unusable(self, host: str) -> str:
        if not self._blacklist.usable(host):
            return " (blacklisted)"
        return " (unreachable)" if self._unreachable.get(host) else ""

    def _publish(self, members: list[Worker]) -> None:
        generation = self._generation + 1
        secret = protocol.generation_secret(self._info.secret, generation)
        store = _core.StoreServer(self._bind_host, 0, secret)
        coordinates = place([(w.id, w.host) for w in members])
        for worker in members:
            c = coordinates[worker.id]
            where = protocol.Assignment(c.rank, c.size, c.local_rank, c.local_size,
                                        c.cross_rank, c.cross_size, store.port)
            self._control.set(protocol.worker_key(generation, str(worker.id)), where.encode())
        self._control.set(protocol.GENERATION_KEY, str(generation).encode())
        self._control.set(protocol.ready_key(generation), b"1")
        for old in self._stores:
            old.stop()  # connections of older generations are refused from now on
        self._stores = [store]
        self._generation = generation
        self._members = [w.id for w in members]
        order = sorted(members, key=lambda w: coordinates[w.id].rank)
        self._say(f"generation {generation} at {time.monotonic() - self._started:.2f} s: "
            f"{len(members)} workers (" + ", ".join(
                f"rank {coordinates[w.id].rank}: worker {w.id} on {w.host}" for w in order) + ")")
