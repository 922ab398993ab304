"""Coordinator: one repository root, its state folder, its Redis, its caches."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from coordinator import arguments
from coordinator.disk import fsio, layout
from coordinator.disk.calljournal import CallJournal
from coordinator.disk.locks import LockManager
from coordinator.disk.spares import SpareTemps
from coordinator.disk.tickets import TicketMarks
from coordinator.engine.agentwrites import AgentWrites
from coordinator.engine.caches import StateCalls, _RefusalCounts, _TextCache, _ViewCache
from coordinator.engine.calls import DEFAULT_OPTIONS, CallOptions
from coordinator.engine.intervening import InterveningWrites
from coordinator.engine.leasing import LeaseGate
from coordinator.engine.native import NativeWrites
from coordinator.engine.observer import EngineObserver
from coordinator.engine.options import Durability, KiB, Match, MiB, Placeholders, Policy, StateCheck
from coordinator.engine.reading import Reader
from coordinator.engine.rebasing import Rebaser
from coordinator.engine.record import Recorder
from coordinator.engine.resources import Disk, StateAccess
from coordinator.engine.results import WriteResult
from coordinator.engine.session import Session
from coordinator.engine.steps import CheckedWrite
from coordinator.engine.write import CheckThenWrite
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import History, HistoryEntry, content_hash, retention
from coordinator.history.footprint import FootprintMeter
from coordinator.state import events as events_mod
from coordinator.state.agentcalls import AgentCallStore
from coordinator.state.connection import REDIS_URL_ENV, redis_call
from coordinator.state.leases import Lease, LeaseStore, normalize_pattern
from coordinator.state.refusals import FileRefusals
from coordinator.state.views import StateStore, connect


class Coordinator:
    """Coordinates reads and writes of many sessions on one repository root.

    It owns the resources (the root's descriptor, the state folder's locks, history and temporaries, the
    Redis connection, the state and lease stores, this process's caches, the observer) and builds the
    parts that work with them: `writer` (the check-then-write, write.py), `reader` (reading.py), the
    `lease_gate` (leasing.py), and behind the writer its `Rebaser` and `Recorder`. Sessions call those
    parts' public methods.

    redis_url: None takes `$EDIT_COORDINATOR_REDIS_URL` if it is set, else starts (or finds) the embedded
        Redis in `<root>/.edit-coordinator/`; otherwise a URL: `redis://`, `rediss://` or `unix://` for one
        server, `redis+sentinel://h:p[,h:p]/SERVICE` for a Sentinel-managed primary, `redis+cluster://h:p
        [,h:p]` for a Redis Cluster (TLS: `rediss+sentinel://`, `rediss+cluster://`); see state/connection.py.
    durability: "fsync" (default) fsyncs every new file and its folder; "none" relies on the atomic rename.
    lock_timeout: seconds to wait for a file's lock before `lock_timeout`.
    max_file_bytes: hard cap for any file (read or written). max_read_bytes: size above which a read needs
        an explicit limit.
    namespace: names this repository in Redis (default: the repository id kept in the state folder, see
        layout.namespace_for).
    redis_client: an already-made client (e.g. fakeredis in unit tests); overrides redis_url.
    policy: "strict" (default) refuses every edit of a file that changed since the session's view;
        "rebase" carries an edit over onto changes that do not overlap or touch it (see rebase.py). A
        session can choose its own with `session(id, policy=...)`.
    match: "exact" (default, Claude Code's Edit) or "flexible": when exact and quote-folded matching fail,
        a unique match of whole lines ignoring trailing whitespace, then one with the indentation shifted
        by a constant (flexmatch.py); the result says which match was used (`match`, `match_lines`). Also
        per session.
    placeholders: "refuse" (default) refuses an edit or write whose new text puts an omission marker
        (`// ... rest of code ...`) where the file had code (placeholders.py); "allow" writes it literally.
    events: publish a change event per write (on the post-write pipeline; no extra round trip).
    notices: let results say which other files the session read have changed since (see events.py).
    state_check: where the session's view comes from before a write (docs/engine.md, "How it works": the decision
        is made against the bytes on disk; losing Redis may only cause refusals).
        "cached" (default): a view this process holds (it recorded it at the session's last read or write
        here) is used without asking Redis, so an edit whose view is held makes no round trip before the
        lock. A session with no view held here is looked up in Redis, and refused (`state_unavailable`)
        when Redis cannot be reached; a refusal made on a held view is checked once more in Redis (another
        process of the same session may have read or written since). A Redis whose connection is known to
        be closed refuses even a held view (a local check, no round trip); a Redis that stopped answering
        without closing it lets a held view be used, and the write is acknowledged with a warning that its
        record could not be made (that session's next edit is then looked up again, and refused while
        Redis is away). A flushed or restarted Redis does not invalidate a held view: the disk decides.
        "always": the view is fetched from Redis before every write (one more round trip per write). It
        earns its place where Redis is the authority on views: a view removed from Redis (an operator's
        reset, a flush, an expiry) then refuses the next edit at once, in every process, and no write is
        made while Redis cannot be reached.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        redis_url: str | None = None,
        *,
        durability: Durability = "fsync",
        policy: Policy = "strict",
        match: Match = "exact",
        placeholders: Placeholders = "refuse",
        lock_timeout: float = 10.0,
        max_file_bytes: int = 100 * MiB,
        max_read_bytes: int = 256 * KiB,
        default_read_lines: int = 2000,
        read_state_ttl: int = 24 * 3600,
        redis_timeout: float = 2.0,
        namespace: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        redis_client: redis.Redis | None = None,
        events: bool = True,
        notices: bool = True,
        state_check: StateCheck = "cached",
    ) -> None:
        arguments.check_durability(durability)
        arguments.check_policy(policy)
        arguments.check_match(match)
        arguments.check_choice(placeholders, "placeholders", ("refuse", "allow"))
        arguments.check_state_check(state_check)
        self.match: Match = match
        self.placeholders: Placeholders = placeholders
        self.state_check: StateCheck = state_check
        root_real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(root_real):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"The root {root_real!r} is not a folder.")
        self.root = root_real
        self.durability: Durability = durability
        self.policy: Policy = policy
        self.fsync = durability == "fsync"
        self.max_file_bytes = max_file_bytes
        self.max_read_bytes = max_read_bytes
        self.default_read_lines = default_read_lines
        try:  # the disk set-up: an OS refusal here is a CoordinatorError like any other
            self.state_dir = layout.ensure_state_dir(state_dir if state_dir else layout.state_dir_of(root_real))
            # Before anything else is created in a new state folder (that is how it is told from an old one).
            self.namespace = namespace or layout.namespace_for(root_real, self.state_dir)
            self.locks = LockManager(layout.locks_dir(self.state_dir), timeout=lock_timeout)
            self._ticket_marks = TicketMarks(layout.tickets_dir(self.state_dir))
            self.history_store = History(self.state_dir, fsync=self.fsync)
            self.tmp_dir = layout.tmp_dir(self.state_dir)
            tmp_dfd = _open_tmp_dir(self.tmp_dir)
            # Every folder is reached from this descriptor, one checked component at a time (fsio.open_parent).
            root_fd = os.open(root_real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _setup_refused(exc, root_real) from exc
        self._disk = Disk(
            root_real, root_fd, tmp_dfd, SpareTemps(tmp_dfd), self.locks, self.history_store, self.fsync, max_file_bytes
        )
        self.redis_url, self.redis = _redis_of(self.state_dir, redis_url, redis_client, redis_timeout)
        redis_client = self.redis
        self.state = StateStore(
            redis_client, self.namespace, ttl_s=read_state_ttl, epoch_file=layout.epoch_file(self.state_dir)
        )
        self.read_state_ttl = read_state_ttl
        self.lease_store = LeaseStore(redis_client, self.namespace, fence_dir=layout.fences_dir(self.state_dir))
        self.publish_events = events
        self.tracker = events_mod.ReadTracker() if notices else None
        self.observer: EngineObserver | None = None
        self._init_process_state()
        self._closed = False

    def _init_process_state(self) -> None:
        """What this process keeps between calls (caches, grants, the lease snapshot), and the parts."""
        views = _ViewCache(self.read_state_ttl)
        self._access = StateAccess(
            self.state,
            StateCalls(views),  # every Redis call of the engine (forgets views on loss)
            views,
            _TextCache(),
            _RefusalCounts(),
            self.tracker,
            self.namespace,
            self.publish_events,
            self.state_check,
        )
        self.lease_gate = LeaseGate(self.lease_store, self._disk, self._access, self._ticket_marks)
        self._build_parts()

    def _build_parts(self) -> None:
        """The engine's parts, each given the resources it works with (the same records, shared)."""
        disk, access, gate = self._disk, self._access, self.lease_gate
        intervening = InterveningWrites(self.history_store)
        self.reader = Reader(
            disk, access, gate, max_read_bytes=self.max_read_bytes, default_read_lines=self.default_read_lines
        )
        recorder = Recorder(disk, access, gate, intervening)
        self.writer = CheckThenWrite(disk, access, gate, Rebaser(disk, access.texts), recorder, intervening)
        # An agent's own writes, guarded through its hooks (coordinator/agents/), and the protocol around
        # them (engine/agentwrites.py): tickets through the lease gate.
        self.native = NativeWrites(disk, access, self.reader, self.writer)
        journal = CallJournal(layout.calls_dir(self.state_dir))  # the calls' copy for when Redis loses them
        self.agent_writes = AgentWrites(self.native, gate, AgentCallStore(self.redis, self.namespace), journal)
        self.file_refusals = FileRefusals(self.redis, self.namespace)

    # -- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:  # refusals counted since the last write: best effort, Redis may be gone
            pipe = self.redis.pipeline(transaction=False)
            self._access.refusals.queue_flush(pipe, self.state.refusals_key)
            if len(pipe):
                pipe.execute()
        except Exception:
            pass
        self._disk.spares.close()
        for fd in (self._disk.tmp_dfd, self._disk.root_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.locks.close()
        self._ticket_marks.close()
        self.history_store.close()
        try:
            self.state.close()
            self.redis.close()
        except Exception:
            pass

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public -------------------------------------------------------------------------------------------
    def observe(self, observer: EngineObserver | None) -> None:
        """Tell `observer` about this coordinator's work from now on (observer.py): its path locks' waits
        and holds, each write's outcome, the change events it publishes. None stops telling."""
        self.observer = observer
        self.writer.observer = observer
        self.native.observer = observer
        self.locks.on_release = observer.lock_released if observer is not None else None

    def session(
        self,
        session_id: str,
        policy: Policy | None = None,
        match: Match | None = None,
        *,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> Session:
        """The session with this id. The same id from any process is the same session (shared read state).

        policy: this session's policy ("strict" or "rebase"); None takes the coordinator's.
        match: this session's matching ("exact" or "flexible"); None takes the coordinator's.
        options: how its calls are shaped (calls.py: `wait_for_lock=False` raises LockBusy where a file's
            lock is taken); also `Session.with_options`.
        """
        arguments.check_session_id(session_id)
        if policy is not None:
            arguments.check_policy(policy)
        if match is not None:
            arguments.check_match(match)
        return Session(self, session_id, policy, match, options)

    def restore(
        self,
        path: str,
        to_version: int | None = None,
        *,
        before_version: int | None = None,
        session: str = "operator",
    ) -> WriteResult:
        """For people: put the whole file back as it was right after `to_version` (0: before the first
        recorded version), or right before `before_version`, discarding every later version, whoever wrote
        it; the result's message lists what was discarded. An undo (`Session.undo`) reverts one write and
        keeps others' work; this does not. Runs as `session` (an operator id), which first reads the file,
        so a write that lands meanwhile is refused as stale, never discarded unseen.
        """
        s = self.session(session)
        try:
            s.read(path, offset=1, limit=1)
        except CoordinatorError as exc:
            if exc.code != ErrorCode.FILE_NOT_FOUND:
                raise
        return s.restore(path, to_version, before_version=before_version)

    def leases(self) -> list[Lease]:
        """Every lease that has not ended, soonest end first."""
        return self.lease_store.live()

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        """Administrator: end one lease (by id) or all leases of a session, whoever holds them."""
        return self.lease_gate.break_lease(lease_id, session)

    def events(
        self,
        since: str | float | None = None,
        paths: Sequence[str] | None = None,
        timeout_s: float | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[events_mod.ChangeEvent]:
        """Follow the change events of this repository (one per successful write), oldest first.

        since: None or "$" only new events, "0" from the oldest kept, an event id, or a unix time.
        paths: lease-style patterns to keep (`src/**/*.py`). timeout_s: stop after this long without an
        event; None follows until `stop()` returns true or the caller stops iterating.
        """
        pats = [normalize_pattern(p, self.root) for p in paths] if paths else None
        return events_mod.follow(self.redis, self.namespace, since=since, paths=pats, timeout_s=timeout_s, stop=stop)

    def recent_events(self, count: int = 50) -> list[events_mod.ChangeEvent]:
        """The newest `count` change events, oldest first."""
        return events_mod.recent(self.redis, self.namespace, count)

    def notices(self, session: str) -> events_mod.Notice | None:
        """Files `session` read through this process that another session has written since, or None.

        Each change is told once (here or in a later result's `notice`). What a session read is known per
        process: a session served by several processes is told by each. One round trip (the path heads),
        none when this process tracks nothing for the session or notices are off."""
        arguments.check_session_id(session)
        tracker = self.tracker
        keys = tracker.seen(session) if tracker is not None else []
        if tracker is None or not keys:
            return None
        heads = self._access.call(lambda: self.state.run_extra(lambda pipe: self.state.queue_heads(pipe, keys)))
        return tracker.notice(session, keys, heads)

    def history(self, path: str) -> list[HistoryEntry]:
        """Versions of `path` that reached the file, newest first."""
        rp = fsio.resolve(self.root, path)
        entries = self.history_store.entries(rp.key)
        if entries and retention.settle(self.state_dir, rp.key, self.root, self.locks):
            entries = self.history_store.entries(rp.key)
        return entries

    def resolve(self, path: str) -> fsio.ResolvedPath:
        return fsio.resolve(self.root, path)

    # -- what the adapters ask (the service, its dashboard and metrics, the hooks, the command line) --------
    def agent_port(self) -> AgentWrites:
        """The port through which agents' own tool calls are checked and recorded (engine/agentwrites.py):
        tickets before a write, records after it, a shell command's targets, the tree watcher's events."""
        return self.agent_writes

    def ping(self) -> bool:
        """Whether Redis answers a PING; raises state_unavailable when it cannot be reached."""
        return self.state.ping()

    def redis_info(self) -> dict[str, Any]:
        """A few INFO fields of the Redis server (one server or the Sentinel primary; on a Cluster, none).
        Empty when Redis cannot answer: health is reported, never raised."""
        try:
            info = redis_call(self.redis.info)
        except CoordinatorError:
            return {}
        if "redis_version" not in info:
            return {}
        return {name: info[name] for name in _INFO_FIELDS if name in info}

    def sessions(self, since_s: float | None = None) -> list[tuple[str, float]]:
        """(session, last seen) of the sessions seen (at most a registration period late), oldest first."""
        return self.state.sessions(since_s)

    def register(self, session: str) -> None:
        """Put `session` in the sessions' registry now (e.g. an MCP server announcing its session)."""
        arguments.check_session_id(session)
        self.state.register(session)

    def last_seen(self, session: str) -> float | None:
        """When `session` was last registered (None: never, or its registry entry is gone)."""
        return self.state.last_seen(session)

    def refusal_counts(self) -> dict[str, int]:
        """Refusals of writes by code, over every process of this repository (flushed after writes)."""
        return self.state.error_counts()

    def refusals_by_file(self) -> dict[str, Any]:
        """The service's per-file refusal tally (state/refusals.py `FileRefusals.snapshot`): by file and
        code, by code over the files kept, the newest refusals."""
        return self.file_refusals.snapshot()

    def count_refusal(self, code: str, path: str, session: str, operation: str) -> None:
        """Count one refusal of `operation` on `path` in the per-file tally; raises state_unavailable when
        Redis cannot be reached, and a path error for a path that is not the repository's."""
        self.file_refusals.record(code, self.resolve(path).key, session, operation)

    def content(self, path: str, digest: str | None) -> bytes | None:
        """The bytes of a recorded version of `path` whose content hash is `digest` (b"" for None: before
        the file existed): from the history, else the file itself when it still holds them (the newest
        version's content is kept in the history only once a later write replaces it); None when neither
        holds them any more (removed by gc, or changed outside)."""
        if digest is None:
            return b""
        key = self.resolve(path).key
        try:
            return bytes(self.history_store.load(digest, key))
        except CoordinatorError:
            pass
        try:
            data = retention.read_on_disk(self.root, key)
        except CoordinatorError:
            return None
        return data if data is not None and content_hash(data) == digest else None

    def footprint_meter(self) -> FootprintMeter:
        """A meter of the history's size on disk (history/footprint.py); it remembers what it counted."""
        return FootprintMeter(self.history_store)

    def keyspace(self) -> tuple[redis.Redis, str]:
        """The Redis client and this repository's namespace, for a store an adapter keeps beside the
        engine's own keys (the service's idempotency records). The engine's keys are its own: use the
        methods above for them."""
        return self.redis, self.namespace

    def check_then_write(self, request: CheckedWrite) -> WriteResult:
        """A write of one's own: the request's change run on the file as it is on disk, under its lock, its
        plan written atomically, with every check and record of the engine's own operations (`CheckedWrite`,
        steps.py, says what each field does; an `Edits` change is also carried over under policy "rebase")."""
        arguments.check_session_id(request.session)
        arguments.check_policy(request.policy)
        return self.writer.check_then_write(request)


_INFO_FIELDS = ("redis_version", "uptime_in_seconds", "connected_clients", "used_memory", "used_memory_human", "role")


def _setup_refused(exc: OSError, root: str) -> CoordinatorError:
    denied = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    return CoordinatorError(
        ErrorCode.PERMISSION_DENIED if denied else ErrorCode.IO_ERROR,
        f"Cannot prepare the coordinator's state folder for the repository {root!r} "
        f"({exc.strerror or exc}). Run as a user who may write the repository and its {layout.STATE_DIR_NAME}/ "
        "folder, or give state_dir= a folder this user may write.",
    )


def _open_tmp_dir(tmp_dir: Path) -> int:
    """The temp files' folder, cleared of temps left by dead processes; its descriptor."""
    tmp_dir.mkdir(exist_ok=True)
    fsio.clean_stale_temps(tmp_dir)
    return os.open(tmp_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _redis_of(
    state_dir: Path, redis_url: str | None, client: redis.Redis | None, timeout: float
) -> tuple[str | None, redis.Redis]:
    """The Redis client: the one given, else one to `redis_url`, else to `$EDIT_COORDINATOR_REDIS_URL`, else
    to the embedded server (started if none is running for this state folder)."""
    if client is not None:
        return redis_url, client
    if redis_url is None:
        redis_url = os.environ.get(REDIS_URL_ENV) or None
    if redis_url is None:
        from coordinator.state.embedded import ensure_embedded_redis

        redis_url = ensure_embedded_redis(state_dir)
    return redis_url, connect(redis_url, timeout=timeout)
