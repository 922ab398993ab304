"""A fleet of agent sessions as real OS processes, with faults injected, and the oracle that judges the end.

`Fleet.run()` starts one process per worker slot (multiprocessing, "forkserver" context by default: the
coordinator is imported once in the fork server, so a worker killed with SIGKILL is replaced in a few
milliseconds), lets them all start at once, and while they run can

* kill a worker with SIGKILL at a random instant of one of its calls (preferring calls in progress), then
  prove the kernel released its file lock (the next taker gets it at once) and start a new incarnation;
* stop the embedded Redis, keep it down, and start it again, proving that nothing was written meanwhile;
* touch files (mtime only), which must never make a session stale;
* sample the files' bytes for torn reads.

Workers write their records (see `worker.agent`) to files under the run folder; shared memory carries
only counters and flags, so a worker killed at any instant can corrupt nothing the others need.

Each worker process runs `worker_main` unless the fleet is given another `target` (the benchmarks pass
one that adds resource figures and profiles around the same loop). The oracle that judges a run lives in
`worker.oracle` (`verify`, `check_recovery`, ...); its names are re-exported here, as before.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import signal
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import RawArray, RawValue
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from coordinator.disk.layout import locks_dir, state_dir_of
from coordinator.errors import CoordinatorError
from worker.agent import (
    Agent,
    AgentConfig,
    Corpus,
    Recorder,
    content_hash,
    parse_counters,
    parse_hot,
    read_records,
    session_id,
    slot_label,
)
from worker.client import FileClient
from worker.oracle import (  # re-exported: the oracle used to live here
    MUTATING_OPS,
    TAGGED_OPS,
    Op,
    OracleReport,
    check_history,
    check_recovery,
    client_reader,
    judge_counts,
    local_reader,
    pair_ops,
    verify,
)
from worker.stats import percentile

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

    from coordinator.client.http import HttpClient

StartMethod = Literal["fork", "spawn", "forkserver"]  # multiprocessing's start methods (Linux)


def _mp_context(method: StartMethod) -> ForkContext | SpawnContext | ForkServerContext:
    """multiprocessing's context for `method`, typed as the concrete context (which has `Process`)."""
    if method == "fork":
        return mp.get_context("fork")
    if method == "spawn":
        return mp.get_context("spawn")
    return mp.get_context("forkserver")


__all__ = [
    "MUTATING_OPS",
    "TAGGED_OPS",
    "Chaos",
    "ClientSpec",
    "Fleet",
    "FleetConfig",
    "FleetRun",
    "Op",
    "OracleReport",
    "Progress",
    "SharedState",
    "WorkerSpec",
    "WorkerTarget",
    "check_history",
    "check_recovery",
    "client_reader",
    "judge_counts",
    "local_reader",
    "make_client",
    "pair_ops",
    "percentile",
    "shutdown_fork_server",
    "summarize",
    "verify",
    "worker_main",
]

_READY_TIMEOUT_S = 120.0
_TICK_S = 0.005
_REDIS_GRACE_S = 0.25


# ---------------------------------------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientSpec:
    """How a worker reaches the files: "coordinator" (in-process engine), "http" (a running service),
    "unsafe" (plain read-modify-write of what the session read: the baseline without the coordinator) or
    "unsafe-edit" (a naive Edit tool that re-reads the file, replaces and writes back, with no lock)."""

    kind: str = "coordinator"
    root: str | None = None
    redis_url: str | None = None
    url: str | None = None
    durability: str = "fsync"
    lock_timeout: float = 10.0
    token: str | None = None  # "http": the token the service accepts
    ca_file: str | None = None  # "http" to an https:// service: the CA file its certificate is checked against
    policy: str = "strict"  # "coordinator": strict or rebase

    @property
    def local(self) -> bool:
        return self.kind in ("coordinator", "unsafe", "unsafe-edit")

    @property
    def unsafe(self) -> bool:
        return self.kind.startswith("unsafe")


def http_client_class() -> type[HttpClient]:
    """`coordinator.client.http.HttpClient`, imported on first use; a clear error if it is not installed."""
    try:
        from coordinator.client import http
    except ImportError as exc:
        raise RuntimeError(
            "--url needs coordinator.client.http.HttpClient, which this installation does not have "
            f"({exc}). Run without --url to use the coordinator in-process."
        ) from exc
    return http.HttpClient


def make_client(spec: ClientSpec) -> FileClient:
    if spec.kind == "coordinator":
        from coordinator.client import LocalClient

        assert spec.root is not None
        return LocalClient.open(
            spec.root,
            spec.redis_url,
            durability=spec.durability,
            lock_timeout=spec.lock_timeout,
            policy=spec.policy,
        )
    if spec.kind == "http":
        if spec.url is None:
            raise ValueError('a client of kind "http" needs the url of the service')
        return http_client_class()(spec.url, token=spec.token, ca_file=spec.ca_file)
    if spec.unsafe:
        from worker.unsafe import UnsafeClient

        assert spec.root is not None
        return UnsafeClient(spec.root, fresh=spec.kind == "unsafe-edit")
    raise ValueError(f"unknown client kind {spec.kind!r}")


# ---------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chaos:
    """Faults injected while a fleet runs. None disables a fault."""

    kill_every_s: float | None = None  # mean interval between two SIGKILLs of a worker
    redis_every_s: float | None = None  # stop the embedded Redis this long after it (re)started ...
    redis_down_s: float = 0.6  # ... and keep it down this long
    touch_every_s: float | None = None  # change a random file's mtime (and only that)
    state_dir: str | None = None  # the embedded Redis to stop and start (its state dir)

    @property
    def any(self) -> bool:
        return any(x is not None for x in (self.kill_every_s, self.redis_every_s, self.touch_every_s))


@dataclass
class FleetConfig:
    root: str  # the repository the fleet works on (its local path; for "http" the oracle reads via a client)
    corpus: Corpus
    client: ClientSpec
    run_dir: str  # records and worker errors go here (never inside the repository)
    workers: int = 4
    think_ms: float = 1.0
    skew: float = 0.0
    seed: int = 0
    duration_s: float | None = 5.0
    edits: int | None = None  # total acknowledged changes, split among workers (instead of a duration)
    disjoint: bool = False  # each worker gets its own share of the files
    chaos: Chaos = field(default_factory=Chaos)
    observe: bool = True  # sample file bytes during the run (local clients only)
    timeout_s: float | None = None  # hard stop; default: duration + 60 s, or 600 s for an edit count
    start_method: StartMethod = "forkserver"

    def files_for(self, index: int) -> tuple[str, ...]:
        files = self.corpus.files
        if not self.disjoint:
            return files
        share = files[index :: self.workers]
        if not share:
            raise ValueError(f"--disjoint needs at least one file per worker ({self.workers} workers)")
        return share

    def quota(self, index: int) -> int | None:
        if self.edits is None:
            return None
        base, extra = divmod(self.edits, self.workers)
        return base + (1 if index < extra else 0)


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    incarnation: int
    agent: AgentConfig
    client: ClientSpec
    records: str
    errors: str
    quota: int | None
    duration_s: float | None


# ---------------------------------------------------------------------------------------------------------
# Shared memory (lock-free: a killed worker cannot leave anything held)
# ---------------------------------------------------------------------------------------------------------
class SharedState:
    """What the fleet and its workers share: start time, stop flag and per-slot counters (lock-free)."""

    def __init__(self, n: int) -> None:
        self.start = RawValue("d", 0.0)
        self.stop = RawValue("b", 0)
        self.ready = RawArray("b", n)
        self.busy = RawArray("i", n)  # file index + 1 while a worker is inside a change call
        self.acked = RawArray("q", n)
        self.attempts = RawArray("q", n)
        self.conflicts = RawArray("q", n)


class _SharedControl:
    """`worker.agent.Control` over the shared arrays, for worker slot `i`."""

    def __init__(self, shared: SharedState, i: int, quota: int | None, duration_s: float | None) -> None:
        self.s = shared
        self.i = i
        self.quota = quota
        self.deadline = shared.start.value + duration_s if duration_s is not None else None

    def should_stop(self) -> bool:
        if self.s.stop.value:
            return True
        if self.quota is not None and self.s.acked[self.i] >= self.quota:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def set_busy(self, file_index: int) -> None:
        self.s.busy[self.i] = file_index

    def count(self, acked: int, attempts: int, conflicts: int) -> None:
        self.s.acked[self.i] += acked
        self.s.attempts[self.i] += attempts
        self.s.conflicts[self.i] += conflicts


def worker_main(
    spec: WorkerSpec,
    shared: SharedState,
    make: Callable[[ClientSpec], FileClient] | None = None,
    run: Callable[[Agent], None] | None = None,
) -> None:
    """Entry point of a worker process: make a client, wait for the start, run one agent session.

    make: the client factory (default `make_client`); run: how to run the agent (default `agent.run()`).
    The benchmarks pass their own, to add clients, resource figures and profiles around the same loop.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops workers; ^C goes to the parent
    try:
        client = (make or make_client)(spec.client)
        shared.ready[spec.index] = 1
        while shared.start.value == 0.0:
            if shared.stop.value:
                return
            time.sleep(0.001)
        recorder = Recorder(spec.records)
        control = _SharedControl(shared, spec.index, spec.quota, spec.duration_s)
        try:
            agent = Agent(client, spec.agent, control, recorder)
            if run is None:
                agent.run()
            else:
                run(agent)
        finally:
            recorder.close()
            client.close()
    except BaseException:
        with open(spec.errors, "w", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        os._exit(1)


# The entry point of a worker process: called as target(spec, shared) in the child. It must be picklable
# (a module-level function, or a functools.partial of one), since workers start from a fork server.
WorkerTarget = Callable[[WorkerSpec, SharedState], None]


# ---------------------------------------------------------------------------------------------------------
# Running a fleet
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    acked: int
    attempts: int
    conflicts: int
    kills: int
    target_edits: int | None
    duration_s: float | None


@dataclass
class FleetRun:
    """What happened: the records of every worker, the chaos events, and the samples of file bytes."""

    config: FleetConfig
    records: list[dict[str, Any]]
    events: list[dict[str, Any]]
    started: float
    ended: float
    worker_errors: list[str]
    observed: dict[str, set[str]]  # file -> hashes of the bytes sampled during the run
    torn_reads: int  # samples that did not even parse (counters / hot-line)
    samples: int

    @property
    def wall_s(self) -> float:
        return max(self.ended - self.started, 1e-9)

    def count_events(self, kind: str) -> int:
        return sum(1 for e in self.events if e["e"] == kind)


class FleetInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGINT) during a run: the workers were stopped and `run` holds what they did so far (their
    records are on disk, so the oracle can judge it). Still a KeyboardInterrupt for callers that only stop."""

    def __init__(self, run: FleetRun) -> None:
        super().__init__("interrupted")
        self.run = run


class Fleet:
    """Runs `config.workers` worker processes until the duration or the edit count is reached.

    target: what each worker process runs (default `worker_main`); see `WorkerTarget`.
    """

    def __init__(self, config: FleetConfig, target: WorkerTarget | None = None) -> None:
        self.cfg = config
        self.target: WorkerTarget = target or worker_main
        if config.workers < 1:
            raise ValueError("a fleet needs at least one worker")
        if config.duration_s is None and config.edits is None:
            raise ValueError("give a duration or an edit count")
        if config.chaos.redis_every_s is not None and not config.chaos.state_dir:
            raise ValueError("Redis chaos needs the embedded server's state dir")
        self.ctx = _mp_context(config.start_method)
        if config.start_method == "forkserver":
            # The fork server imports the coordinator (and the main module) once; each worker is a fork of it.
            # coordinator.client too: every worker's client factory imports it (0.14 s of CPU in each worker).
            self.ctx.set_forkserver_preload(["__main__", "worker.fleet", "coordinator.client"])
        self.rng = random.Random(config.seed ^ 0x5EED)
        self.events: list[dict[str, Any]] = []
        self.shared = SharedState(config.workers)
        self.procs: dict[int, Any] = {}
        self.incarnation: dict[int, int] = {}
        Path(config.run_dir, "records").mkdir(parents=True, exist_ok=True)
        Path(config.run_dir, "errors").mkdir(parents=True, exist_ok=True)
        self._locks: Any = None
        self._observer_stop = threading.Event()
        self._observed: dict[str, set[str]] = defaultdict(set)
        self._torn_reads = 0
        self._samples = 0

    # -- processes ----------------------------------------------------------------------------------------
    def _spec(self, i: int, inc: int) -> WorkerSpec:
        cfg = self.cfg
        sid = session_id(i, inc)
        agent = AgentConfig(
            workload=cfg.corpus.workload,
            files=cfg.files_for(i),
            session=sid,
            slot=slot_label(i),
            seed=hash((cfg.seed, i, inc)) & 0x7FFFFFFF,
            think_ms=cfg.think_ms,
            skew=cfg.skew,
            created_dir=cfg.corpus.created_dir,
        )
        return WorkerSpec(
            index=i,
            incarnation=inc,
            agent=agent,
            client=cfg.client,
            records=str(Path(cfg.run_dir, "records", f"{sid}.jsonl")),
            errors=str(Path(cfg.run_dir, "errors", f"{sid}.txt")),
            quota=cfg.quota(i),
            duration_s=cfg.duration_s,
        )

    def _spawn(self, i: int) -> None:
        inc = self.incarnation.get(i, -1) + 1
        self.incarnation[i] = inc
        p = self.ctx.Process(target=self.target, args=(self._spec(i, inc), self.shared), name=f"ec-worker-{i}.{inc}")
        p.daemon = True
        p.start()
        self.procs[i] = p

    def _worker_error(self, i: int) -> str:
        sid = session_id(i, self.incarnation[i])
        try:
            return Path(self.cfg.run_dir, "errors", f"{sid}.txt").read_text(encoding="utf-8")
        except OSError:
            return f"worker {sid} exited with code {self.procs[i].exitcode} and left no traceback"

    def _stop_all(self) -> None:
        self.shared.stop.value = 1
        deadline = time.monotonic() + 5.0
        for p in self.procs.values():
            p.join(max(deadline - time.monotonic(), 0.0))
        for p in self.procs.values():
            if p.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
        for p in self.procs.values():
            p.join()
            with contextlib.suppress(ValueError, AttributeError):
                p.close()

    # -- the run ------------------------------------------------------------------------------------------
    def run(self, progress: Callable[[Progress], None] | None = None) -> FleetRun:
        cfg = self.cfg
        errors: list[str] = []
        observer: threading.Thread | None = None
        started = ended = time.monotonic()
        interrupted = False
        try:
            for i in range(cfg.workers):
                self._spawn(i)
            self._wait_ready(errors)
            if errors:
                return self._result(started, time.monotonic(), errors)
            started = time.monotonic()
            self.shared.start.value = started
            if cfg.observe and cfg.client.local:
                observer = threading.Thread(target=self._observe, name="ec-observer", daemon=True)
                observer.start()
            ended = self._supervise(started, errors, progress)
        except KeyboardInterrupt:
            interrupted, ended = True, time.monotonic()
        finally:
            self._observer_stop.set()
            self._stop_all()
            if observer is not None:
                observer.join()
            self._restore_redis()
        result = self._result(started, ended, errors)
        if interrupted:
            raise FleetInterrupted(result)
        return result

    def _wait_ready(self, errors: list[str]) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not all(self.shared.ready):
            for i, p in self.procs.items():
                if p.exitcode is not None and not self.shared.ready[i]:
                    errors.append(self._worker_error(i))
                    return
            if time.monotonic() > deadline:
                errors.append(f"workers not ready after {_READY_TIMEOUT_S:.0f} s")
                return
            time.sleep(0.002)

    def _supervise(self, started: float, errors: list[str], progress: Callable[[Progress], None] | None) -> float:
        cfg, chaos = self.cfg, self.cfg.chaos
        timeout = cfg.timeout_s or ((cfg.duration_s or 0.0) + 60.0 if cfg.duration_s else 600.0)
        next_kill = started + self._interval(chaos.kill_every_s)
        next_touch = started + self._interval(chaos.touch_every_s)
        redis = _RedisChaos(self, started) if chaos.redis_every_s is not None else None
        last_progress = 0.0
        finished: set[int] = set()
        while True:
            now = time.monotonic()
            for i, p in self.procs.items():
                if i not in finished and p.exitcode is not None:
                    finished.add(i)
                    if p.exitcode != 0:
                        errors.append(self._worker_error(i))
            if len(finished) == cfg.workers or errors:
                return now
            if now - started > timeout:
                errors.append(f"the run did not finish within {timeout:.0f} s; workers were stopped")
                return now
            stopping = self._stopping(now, started)
            if chaos.kill_every_s is not None and now >= next_kill and not stopping:
                self._kill_one(finished)
                next_kill = time.monotonic() + self._interval(chaos.kill_every_s)
            if chaos.touch_every_s is not None and now >= next_touch:
                self._touch_one()
                next_touch = now + self._interval(chaos.touch_every_s)
            if redis is not None:
                redis.tick(now, stopping)
            if progress is not None and now - last_progress >= 0.1:
                last_progress = now
                progress(self._progress(now - started))
            time.sleep(_TICK_S)

    def _stopping(self, now: float, started: float) -> bool:
        cfg = self.cfg
        if cfg.duration_s is not None and now >= started + cfg.duration_s - 0.05:
            return True
        if cfg.edits is not None:
            return int(sum(self.shared.acked)) >= cfg.edits
        return False

    def _interval(self, mean: float | None) -> float:
        return self.rng.expovariate(1.0 / mean) if mean else float("inf")

    def _progress(self, elapsed: float) -> Progress:
        s = self.shared
        return Progress(
            elapsed_s=elapsed,
            acked=sum(s.acked),
            attempts=sum(s.attempts),
            conflicts=sum(s.conflicts),
            kills=self.count_kills(),
            target_edits=self.cfg.edits,
            duration_s=self.cfg.duration_s,
        )

    def count_kills(self) -> int:
        return sum(1 for e in self.events if e["e"] == "kill")

    # -- faults -------------------------------------------------------------------------------------------
    def _kill_one(self, finished: set[int]) -> None:
        """SIGKILL a worker, preferably inside a change call, prove its lock is free, start its successor."""
        live = [i for i, p in self.procs.items() if i not in finished and p.exitcode is None]
        if not live:
            return
        i = self.rng.choice(live)
        p = self.procs[i]
        wait_until = time.monotonic() + 0.05
        while self.shared.busy[i] == 0 and time.monotonic() < wait_until:
            time.sleep(0.0002)
        time.sleep(self.rng.uniform(0.0, 0.001))  # a random instant, most often inside the call
        busy = self.shared.busy[i]
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
        p.join()
        t = time.monotonic()
        event: dict[str, Any] = {"e": "kill", "t": t, "slot": i, "session": session_id(i, self.incarnation[i])}
        if busy:
            files = self.cfg.files_for(i)
            event["file"] = files[busy - 1] if 0 < busy <= len(files) else None
            event["lock_wait_s"] = self._probe_lock(event["file"])
        self.events.append(event)
        with contextlib.suppress(ValueError, AttributeError):
            p.close()
        self.shared.busy[i] = 0
        if not self.shared.stop.value:
            self._spawn(i)

    def _probe_lock(self, path: str | None) -> float | None:
        """Take and release `path`'s lock right after its holder died: the kernel must have released it.

        Returns the wait in seconds (live sessions may hold it for a moment), or -1.0 if it could not be had
        within 5 s, which the oracle reports as a lock left held."""
        if path is None or self.cfg.client.kind != "coordinator":
            return None
        if self._locks is None:
            from coordinator.disk.locks import LockManager

            self._locks = LockManager(locks_dir(state_dir_of(self.cfg.root)))
        t0 = time.perf_counter()
        try:
            held = self._locks.acquire(path, timeout=5.0)
        except CoordinatorError:
            return -1.0
        held.release()
        return time.perf_counter() - t0

    def _touch_one(self) -> None:
        files = self.cfg.corpus.files
        path = Path(self.cfg.root, files[self.rng.randrange(len(files))])
        with contextlib.suppress(OSError):
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + self.rng.randint(1, 10**9)))
            self.events.append({"e": "touch", "t": time.monotonic(), "file": str(path)})

    def _restore_redis(self) -> None:
        """Leave the embedded Redis running if a Redis fault stopped it (the caller owns its lifetime)."""
        if self.cfg.chaos.redis_every_s is None or not self.cfg.chaos.state_dir:
            return
        from coordinator.state.embedded import ensure_embedded_redis

        ensure_embedded_redis(Path(self.cfg.chaos.state_dir))

    def _observe(self) -> None:
        """Sample file bytes as a reader would: every sample must be a whole version of the file."""
        files = self.cfg.corpus.files
        workload = self.cfg.corpus.workload
        rng = random.Random(self.cfg.seed)
        while not self._observer_stop.is_set():
            rel = files[rng.randrange(len(files))]
            try:
                with open(Path(self.cfg.root, rel), "rb") as f:
                    data = f.read()
            except OSError:
                continue
            self._samples += 1
            if workload in ("counters", "hot-line"):
                text = data.decode("utf-8", "replace")
                parsed = parse_counters(text) if workload == "counters" else parse_hot(text)
                if parsed is None:
                    self._torn_reads += 1
            self._observed[rel].add(content_hash(data))
            self._observer_stop.wait(0.002)

    # -- result -------------------------------------------------------------------------------------------
    def _result(self, started: float, ended: float, errors: list[str]) -> FleetRun:
        records: list[dict[str, Any]] = []
        for path in sorted(Path(self.cfg.run_dir, "records").glob("*.jsonl")):
            records.extend(read_records(path))
        return FleetRun(
            config=self.cfg,
            records=records,
            events=list(self.events),
            started=started,
            ended=ended,
            worker_errors=errors,
            observed=dict(self._observed),
            torn_reads=self._torn_reads,
            samples=self._samples,
        )


class _RedisChaos:
    """Stops the embedded Redis, proves nothing is written while it is down, and starts it again."""

    def __init__(self, fleet: Fleet, started: float) -> None:
        self.fleet = fleet
        self.chaos = fleet.cfg.chaos
        self.state_dir = Path(self.chaos.state_dir or "")
        self.next_down = started + (self.chaos.redis_every_s or 0.0)
        self.down_at: float | None = None
        self.snapshot: dict[str, str | None] | None = None
        self.snap_at = 0.0

    def _hashes(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for rel in self.fleet.cfg.corpus.files:
            try:
                out[rel] = content_hash(Path(self.fleet.cfg.root, rel).read_bytes())
            except OSError:
                out[rel] = None
        return out

    def tick(self, now: float, stopping: bool) -> None:
        from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis

        events = self.fleet.events
        if self.down_at is None:
            if now >= self.next_down and not stopping:
                stop_embedded_redis(self.state_dir)
                self.down_at = time.monotonic()
                self.snapshot = None
                events.append({"e": "redis_down", "t": self.down_at})
            return
        if self.snapshot is None and now >= self.down_at + _REDIS_GRACE_S:
            # Calls that passed Redis before it went down may still finish their write; after the grace
            # period, nothing may change until it is back.
            self.snapshot = self._hashes()
            self.snap_at = time.monotonic()
        if now >= self.down_at + self.chaos.redis_down_s or stopping:
            changed: list[str] = []
            if self.snapshot is not None:
                after = self._hashes()
                changed = [f for f, h in after.items() if h != self.snapshot.get(f)]
            t_up = time.monotonic()
            events.append(
                {"e": "redis_window", "t_down": self.down_at, "t_snap": self.snap_at if self.snapshot else None,
                 "t_up": t_up, "changed": changed}
            )  # fmt: skip
            ensure_embedded_redis(self.state_dir)
            events.append({"e": "redis_up", "t": time.monotonic()})
            self.down_at = None
            self.next_down = time.monotonic() + (self.chaos.redis_every_s or 0.0)


def shutdown_fork_server() -> None:
    """Stop this process's multiprocessing fork server, if one runs (it also ends when this process ends)."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)
    if stop is not None:
        with contextlib.suppress(Exception):
            stop()


# ---------------------------------------------------------------------------------------------------------
# Summary figures
# ---------------------------------------------------------------------------------------------------------
def summarize(run: FleetRun) -> dict[str, Any]:
    """The figures of a run: attempts, acknowledged, refusals by code, throughput, latency and lock wait."""
    ops, reads = pair_ops(run.records)
    ops = [o for o in ops if o.op in MUTATING_OPS]
    done = [o for o in ops if o.code is not None]
    ok = [o for o in done if o.code == "ok"]
    refused = Counter(o.code for o in done if o.code != "ok")
    lat = [o.latency_s for o in done if o.latency_s is not None]
    lat_ok = [o.latency_s for o in ok if o.latency_s is not None]
    wait = [o.lock_wait_s for o in ok if o.lock_wait_s is not None]
    hold = [o.lock_hold_s for o in ok if o.lock_hold_s is not None]
    # Per logical change: from its first attempt to its acknowledgement, re-reads and retries included.
    first: dict[tuple[str, int], float] = {}
    for o in ops:
        first.setdefault((o.session, o.change_id), o.t)
    e2e = [o.t_end - first[(o.session, o.change_id)] for o in ok if o.t_end is not None]

    def ms(values: list[float], q: float) -> float | None:
        p = percentile(values, q)
        return None if p is None else round(p * 1000.0, 3)

    cfg = run.config
    return {
        "workload": cfg.corpus.workload,
        "client": cfg.client.kind,
        "workers": cfg.workers,
        "files": len(cfg.corpus.files),
        "disjoint": cfg.disjoint,
        "think_ms": cfg.think_ms,
        "skew": cfg.skew,
        "durability": cfg.client.durability,
        "wall_s": round(run.wall_s, 3),
        "attempts": len(done),
        "acknowledged": len(ok),
        "refused": dict(sorted(refused.items())),
        "conflict_rate": round(sum(refused.values()) / len(done), 4) if done else 0.0,
        "in_flight": len(ops) - len(done),
        "reads": len(reads),
        "reads_refused": sum(1 for r in reads if r.get("c") != "ok"),
        "throughput_per_s": round(len(ok) / run.wall_s, 1),
        "latency_ms": {"p50": ms(lat, 50), "p95": ms(lat, 95), "p99": ms(lat, 99)},
        "latency_ok_ms": {"p50": ms(lat_ok, 50), "p95": ms(lat_ok, 95), "p99": ms(lat_ok, 99)},
        "change_latency_ms": {"p50": ms(e2e, 50), "p95": ms(e2e, 95), "p99": ms(e2e, 99)},
        "lock_wait_ms": {"p50": ms(wait, 50), "p95": ms(wait, 95), "p99": ms(wait, 99)},
        "lock_hold_ms": {"p50": ms(hold, 50), "p95": ms(hold, 95), "p99": ms(hold, 99)},
        "kills": run.count_events("kill"),
        "redis_restarts": run.count_events("redis_up"),
        "touches": run.count_events("touch"),
        "samples": run.samples,
    }
