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

`verify()` is the oracle. It trusts only the records and the final bytes on disk, never the system under
test: every acknowledged change must be in the final files, nothing may be there that no session intended,
and every file (and every sampled read) must be exactly one of the versions some intended change produced,
or the original. A change whose worker was killed during the call ("in flight") may be present or absent.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import random
import signal
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from multiprocessing.sharedctypes import RawArray, RawValue
from pathlib import Path
from typing import Any

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.layout import locks_dir, state_dir_of

from .agent import (
    TAG_RE,
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
from .client import Client

MUTATING_OPS = frozenset({"increment", "insert", "replace", "delete", "write", "create"})
TAGGED_OPS = frozenset({"insert", "replace", "write", "create"})
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
    policy: str = "strict"  # "coordinator": strict or rebase

    @property
    def local(self) -> bool:
        return self.kind in ("coordinator", "unsafe", "unsafe-edit")

    @property
    def unsafe(self) -> bool:
        return self.kind.startswith("unsafe")


def http_client_class() -> type:
    """`worker.http_client.HttpClient`, imported on first use; a clear error if it is not installed."""
    try:
        from . import http_client  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        raise RuntimeError(
            "--url needs worker.http_client.HttpClient, which this installation does not have "
            f"({exc}). Run without --url to use the coordinator in-process."
        ) from exc
    return http_client.HttpClient  # type: ignore[no-any-return]


def make_client(spec: ClientSpec) -> Client:
    if spec.kind == "coordinator":
        from .client import InProcessClient

        assert spec.root is not None
        return InProcessClient.open(
            spec.root,
            spec.redis_url,
            durability=spec.durability,
            lock_timeout=spec.lock_timeout,
            policy=spec.policy,
        )
    if spec.kind == "http":
        return http_client_class()(spec.url, token=spec.token)  # type: ignore[no-any-return]
    if spec.unsafe:
        from .unsafe import UnsafeClient

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
    start_method: str = "forkserver"

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
class _Shared:
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

    def __init__(self, shared: _Shared, i: int, quota: int | None, duration_s: float | None) -> None:
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


def _worker_main(
    spec: WorkerSpec,
    shared: _Shared,
    make: Callable[[ClientSpec], Client] | None = None,
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


class Fleet:
    """Runs `config.workers` worker processes until the duration or the edit count is reached."""

    def __init__(self, config: FleetConfig) -> None:
        self.cfg = config
        if config.workers < 1:
            raise ValueError("a fleet needs at least one worker")
        if config.duration_s is None and config.edits is None:
            raise ValueError("give a duration or an edit count")
        if config.chaos.redis_every_s is not None and not config.chaos.state_dir:
            raise ValueError("Redis chaos needs the embedded server's state dir")
        self.ctx = mp.get_context(config.start_method)
        if config.start_method == "forkserver":
            # The fork server imports the coordinator (and the main module) once; each worker is a fork of it.
            self.ctx.set_forkserver_preload(["__main__", "worker.fleet"])
        self.rng = random.Random(config.seed ^ 0x5EED)
        self.events: list[dict[str, Any]] = []
        self.shared = _Shared(config.workers)
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
        p = self.ctx.Process(target=_worker_main, args=(self._spec(i, inc), self.shared), name=f"ec-worker-{i}.{inc}")
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
        finally:
            self._observer_stop.set()
            self._stop_all()
            if observer is not None:
                observer.join()
            self._restore_redis()
        return self._result(started, ended, errors)

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
            return sum(self.shared.acked) >= cfg.edits
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
            from coordinator.locks import LockManager

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
        from coordinator.embedded import ensure_embedded_redis

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
        from coordinator.embedded import ensure_embedded_redis, stop_embedded_redis

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
# Operations: intents paired with outcomes
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Op:
    session: str
    seq: int
    change_id: int
    slot: str | None
    file: str
    op: str
    t: float
    expected: str | None
    tag: str | None
    gone: str | None
    value: int | None
    code: str | None = None  # None: in flight when its worker died
    latency_s: float | None = None
    lock_wait_s: float | None = None
    lock_hold_s: float | None = None
    mismatch: str | None = None
    rebased_to: str | None = None  # policy rebase: the version the carried-over edit produced
    t_end: float | None = None


def pair_ops(records: Iterable[dict[str, Any]]) -> tuple[list[Op], list[dict[str, Any]]]:
    """Intents matched with their outcomes, and the read records."""
    ops: dict[tuple[str, int], Op] = {}
    reads: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    for r in records:
        k = r.get("k")
        if k == "i":
            ops[(r["s"], r["n"])] = Op(
                r["s"], r["n"], r.get("cid", 0), r.get("slot"), r["f"], r["op"], r["t"],
                r.get("x"), r.get("m"), r.get("g"), r.get("v"),
            )  # fmt: skip
        elif k == "o":
            outcomes.append(r)
        elif k == "r":
            reads.append(r)
    for r in outcomes:
        op = ops.get((r["s"], r["n"]))
        if op is None:
            continue
        op.code = r["c"]
        op.latency_s = r.get("lat")
        op.lock_wait_s = r.get("w")
        op.lock_hold_s = r.get("h")
        op.mismatch = r.get("xm")
        op.rebased_to = r.get("rb")
        op.t_end = r.get("t")
    return sorted(ops.values(), key=lambda o: o.t), reads


# ---------------------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------------------
@dataclass
class OracleReport:
    ok: bool = True
    lost_updates: int = 0  # acknowledged changes missing from the final files
    torn_files: list[str] = field(default_factory=list)  # final files that are no whole version
    torn_reads: int = 0  # sampled reads that were no whole version
    phantom_writes: int = 0  # changes present that no session made, or that were refused
    mismatches: int = 0  # the engine wrote other bytes than the change computed
    in_flight: int = 0  # calls cut short by a kill (allowed either way)
    in_flight_landed: int = 0  # of those, how many are in the files (counters / hot-line: the surplus)
    verified: int = 0  # acknowledged changes checked
    locks_left_held: int = 0
    stale_temp_files: list[str] = field(default_factory=list)
    redis_windows: int = 0
    written_while_down: list[str] = field(default_factory=list)
    acked_while_down: int = 0
    refused_while_down: int = 0
    details: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.ok = False
        if len(self.details) < 25:
            self.details.append(message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def local_reader(root: str | os.PathLike[str]) -> Callable[[str], bytes | None]:
    def read(rel: str) -> bytes | None:
        try:
            return Path(root, rel).read_bytes()
        except FileNotFoundError:
            return None

    return read


def client_reader(client: Client, session: str = "oracle") -> Callable[[str], bytes | None]:
    """Reads final files through a client (for a remote service); the text is encoded back as UTF-8."""

    def read(rel: str) -> bytes | None:
        try:
            return client.read(session, rel, offset=None, limit=10**7).content.encode("utf-8")
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                return None
            raise

    return read


def verify(
    run: FleetRun, read: Callable[[str], bytes | None] | None = None, check_versions: bool | None = None
) -> OracleReport:
    """Judge a finished run against the final files (read with `read`; default: from the local root).

    check_versions: require every final file and every sample to be a version some intent produced (or the
    original); default: on for the coordinator clients, off for the unsafe baseline, whose writes are not
    the changes the agents computed.
    """
    cfg = run.config
    read = read or local_reader(cfg.root)
    if check_versions is None:
        check_versions = not cfg.client.unsafe
    rep = OracleReport()
    ops, _ = pair_ops(run.records)
    ops = [o for o in ops if o.op in MUTATING_OPS]
    rep.in_flight = sum(1 for o in ops if o.code is None)
    if check_versions:
        rep.mismatches = sum(1 for o in ops if o.mismatch)
        if rep.mismatches:
            rep.fail(f"{rep.mismatches} changes were written with other bytes than the change computed")
    for err in run.worker_errors:
        rep.fail("worker error: " + err.strip().splitlines()[-1] if err.strip() else "worker error")

    files = list(cfg.corpus.files)
    created = sorted({o.file for o in ops if o.op == "create" and o.code in ("ok", None)})
    final = {rel: read(rel) for rel in files + created}

    # Torn: every final file and every sampled read is a whole version (original or an intended result).
    known: dict[str, set[str]] = defaultdict(set)
    for rel, h in cfg.corpus.original.items():
        known[rel].add(h)
    unverifiable: set[str] = set()
    rebase = getattr(cfg.client, "policy", "strict") == "rebase"
    for o in ops:
        if o.rebased_to is not None:
            known[o.file].add(o.rebased_to)
        elif o.code is None and rebase:
            unverifiable.add(o.file)  # killed mid-call: it may have been carried over onto unknown bytes
        elif o.code in ("ok", None):
            if o.expected is None:
                unverifiable.add(o.file)
            else:
                known[o.file].add(o.expected)
    if check_versions:
        for rel, data in final.items():
            if data is None or rel in unverifiable:
                continue
            if content_hash(data) not in known[rel]:
                rep.torn_files.append(rel)
                rep.fail(f"{rel}: the final bytes are no version any change produced (torn or foreign)")
        torn = 0
        for rel, hashes in run.observed.items():
            if rel not in unverifiable:
                torn += len(hashes - known[rel])
        rep.torn_reads = max(torn, run.torn_reads)
    else:
        rep.torn_reads = run.torn_reads
    if rep.torn_reads:
        rep.fail(f"{rep.torn_reads} sampled reads saw a file that was no whole version")

    workload = cfg.corpus.workload
    if workload == "counters":
        _verify_counters(rep, ops, final)
    elif workload == "hot-line":
        _verify_hot(rep, ops, final)
    else:
        _verify_tags(rep, ops, final)

    _verify_events(rep, run, ops)
    return rep


def _verify_counters(rep: OracleReport, ops: list[Op], final: dict[str, bytes | None]) -> None:
    acked: Counter[tuple[str, str]] = Counter()
    flying: Counter[tuple[str, str]] = Counter()
    for o in ops:
        if o.slot is None:
            continue
        if o.code == "ok":
            acked[(o.file, o.slot)] += 1
        elif o.code is None:
            flying[(o.file, o.slot)] += 1
    for rel, data in final.items():
        values = parse_counters(data.decode("utf-8", "replace")) if data is not None else None
        if values is None:
            if rel not in rep.torn_files:
                rep.torn_files.append(rel)
            rep.fail(f"{rel}: not a well-formed counters file at the end (torn or truncated)")
            values = {}
        slots = {s for (f, s) in acked if f == rel} | set(values)
        for slot in sorted(slots):
            _judge_counter(rep, f"{rel} {slot}", acked[(rel, slot)], flying[(rel, slot)], values.get(slot, 0))


def _judge_counter(rep: OracleReport, where: str, acked: int, flying: int, value: int) -> None:
    """A counter must hold every acknowledged increment, plus at most the ones in flight when a kill hit."""
    rep.verified += acked
    if value < acked:
        rep.lost_updates += acked - value
        rep.fail(f"{where}: {acked} increments acknowledged, the file says {value}")
    elif value > acked + flying:
        rep.phantom_writes += value - acked - flying
        rep.fail(f"{where}: the file says {value}, but only {acked} acknowledged (+{flying} in flight)")
    else:
        rep.in_flight_landed += value - acked


def _verify_hot(rep: OracleReport, ops: list[Op], final: dict[str, bytes | None]) -> None:
    acked: Counter[str] = Counter(o.file for o in ops if o.code == "ok")
    flying: Counter[str] = Counter(o.file for o in ops if o.code is None)
    for rel, data in final.items():
        value = parse_hot(data.decode("utf-8", "replace")) if data is not None else None
        if value is None:
            if rel not in rep.torn_files:
                rep.torn_files.append(rel)
            rep.fail(f"{rel}: not a well-formed hot-line file at the end (torn or truncated)")
            value = 0
        _judge_counter(rep, rel, acked[rel], flying[rel], value)


def _verify_tags(rep: OracleReport, ops: list[Op], final: dict[str, bytes | None]) -> None:
    """Markers and mixed: every acknowledged tag present once in its file, deleted lines stay deleted."""
    found: dict[str, Counter[str]] = {}
    for rel, data in final.items():
        text = data.decode("utf-8", "replace") if data is not None else ""
        found[rel] = Counter(m.group(0) for m in TAG_RE.finditer(text))
    intended: dict[str, Op] = {o.tag: o for o in ops if o.tag}
    for o in ops:
        if o.op in TAGGED_OPS and o.tag:
            n = found.get(o.file, Counter())[o.tag]
            if o.code == "ok":
                rep.verified += 1
                if n == 0:
                    rep.lost_updates += 1
                    rep.fail(f"{o.file}: acknowledged {o.op} {o.tag} by {o.session} is missing")
                elif n > 1:
                    rep.phantom_writes += n - 1
                    rep.fail(f"{o.file}: {o.tag} is there {n} times")
            elif o.code is None:
                rep.in_flight_landed += 1 if n else 0
                if n > 1:
                    rep.phantom_writes += n - 1
                    rep.fail(f"{o.file}: {o.tag} (in flight) is there {n} times")
            elif n:
                rep.phantom_writes += n
                rep.fail(f"{o.file}: {o.tag} was refused ({o.code}) but is in the file")
        elif o.op == "delete" and o.code == "ok" and o.gone:
            rep.verified += 1
            data = final.get(o.file)
            if data is not None and o.gone.encode("utf-8") in data:
                rep.lost_updates += 1
                rep.fail(f"{o.file}: a line deleted by {o.session} (acknowledged) is back")
    for rel, tags in found.items():
        for tag, n in tags.items():
            o = intended.get(tag)
            if o is None or o.file != rel:
                rep.phantom_writes += n
                rep.fail(f"{rel}: {tag} is in the file but no session put it there")


def _verify_events(rep: OracleReport, run: FleetRun, ops: list[Op]) -> None:
    for e in run.events:
        if e["e"] == "kill" and e.get("lock_wait_s") == -1.0:
            rep.locks_left_held += 1
            rep.fail(f"the lock of {e.get('file')} was still held 5 s after its holder was killed")
        elif e["e"] == "redis_window":
            rep.redis_windows += 1
            t_down, t_up = e["t_down"], e["t_up"]
            for o in ops:
                if t_down < o.t < t_up:
                    if o.code == "ok":
                        rep.acked_while_down += 1
                        rep.fail(f"{o.file}: {o.op} by {o.session} was acknowledged while Redis was down")
                    elif o.code == ErrorCode.STATE_UNAVAILABLE.value:
                        rep.refused_while_down += 1
            if e["changed"]:
                # A call that passed Redis before it went down may still be writing; anything else is a
                # write that failed to fail closed.
                late = {o.file for o in ops if o.t < t_down and (o.t_end is None or o.t_end > (e["t_snap"] or t_down))}
                for rel in e["changed"]:
                    if rel not in late:
                        rep.written_while_down.append(rel)
                        rep.fail(f"{rel} changed while Redis was down")


def check_recovery(rep: OracleReport, root: str, files: Iterable[str], redis_url: str | None) -> None:
    """After a run (all workers gone): no temporary file in the repository, none left in the state folder
    once a coordinator has opened it again (the recovery), and every file's lock free at once."""
    from coordinator import Coordinator
    from coordinator.layout import STATE_DIR_NAME, tmp_dir
    from coordinator.locks import LockManager

    state = Path(root, STATE_DIR_NAME)
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == Path(root):
            dirnames[:] = [d for d in dirnames if d != STATE_DIR_NAME]
        for name in filenames:
            if ".ec-" in name and name.endswith(".tmp"):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                rep.stale_temp_files.append(rel)
                rep.fail(f"temporary file {rel} left in the repository")
    Coordinator(root, redis_url).close()  # opening the root again is the recovery: it removes dead temps
    tmp = tmp_dir(state)
    left = sorted(n for n in os.listdir(tmp) if n.endswith(".tmp")) if tmp.is_dir() else []
    for name in left:
        rep.stale_temp_files.append(f"{STATE_DIR_NAME}/tmp/{name}")
        rep.fail(f"temporary file {name} still in the state folder after recovery")
    locks = LockManager(locks_dir(state))
    for rel in files:
        try:
            locks.acquire(rel, timeout=1.0).release()
        except CoordinatorError:
            rep.locks_left_held += 1
            rep.fail(f"the lock of {rel} is still held after the run")


# ---------------------------------------------------------------------------------------------------------
# Summary figures
# ---------------------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))
    return s[k]


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
