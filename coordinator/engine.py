"""Coordinator and Session: the one code path through which every read and write passes.

The check-then-write, for `edit` / `multi_edit` / `write` / `undo` by session S on path P:
1. Outside the lock: validate arguments, resolve P inside the root, fetch S's read state for P from Redis
   (this round trip also proves Redis is up: if it is not, the call fails closed before anything is touched).
2. Take the OS lock for P (a lock file under the state folder).
3. Inside the lock, synchronously and with no network I/O: read the file bytes; hash them; compare with S's
   recorded hash; decode, match, replace, encode; keep the pre-image in history; write a temporary file and
   rename it over P; append the history index.
4. Release the lock; then record S's new read state and P's new version in Redis.

Staleness rule: S's view is current iff the hash of the file now equals the hash S recorded at its last
read or write of P. mtime and size are recorded and reported but never decide: a touched file with the
same bytes is not stale, and a rewrite within the same mtime tick is.

If step 4 fails, the write stands and S's next edit is refused (its recorded hash is the old one): the safe
direction.

Policy `rebase` (per coordinator or per session; `strict` is the default): when the file changed since S's
view, an edit is not refused outright. Under the lock, the content S last saw (kept in the history's
content-addressed store: a read stores it unless it is there already, a write's pre-image is the next
writer's hard link) is loaded from local disk, and `rebase.rebase_edits` carries the edit over onto the
current text if no intervening change overlaps or touches it. S's read state then becomes its *view*
(what it saw plus its own edit), never the current file: changes it has not seen stay unseen, and its next
edit near them is checked again. Who made the intervening changes is looked up in the history index after
the lock is released.

Leases (leases.py) are checked before the lock, on the read-state round trip (or, when this process's
cached view saves that round trip, against a lease snapshot at most `LEASE_SNAPSHOT_S` old; a grant waits
that long before it returns, so no process can miss it). A write under the writer's own lease is fenced
under the lock against a local fence file. Every write publishes a change event (events.py) on the
post-write pipeline, where notices about other files the session read also ride.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

import redis

from . import events as events_mod
from . import fsio, layout, rebase, semantics
from .errors import CoordinatorError, ErrorCode
from .history import History, HistoryEntry, content_hash
from .leases import Lease, LeaseCheck, LeaseStore, check_leases, leased_error, normalize_pattern
from .locks import LockManager
from .state import KIND_READ, KIND_WRITE, ReadState, StateStore, connect
from .textio import Decoded, Encoding, decode_bytes, encode_text

_T = TypeVar("_T")

KiB = 1024
MiB = 1024 * KiB

Durability = Literal["fsync", "none"]
StateCheck = Literal["always", "cached"]
Policy = Literal["strict", "rebase"]
POLICIES: tuple[str, ...] = ("strict", "rebase")
# How old a lease snapshot may be when this process's cached view spares the pre-lock round trip. A grant
# waits this long before returning, so every snapshot taken before it has been dropped by then.
LEASE_SNAPSHOT_S = 0.2
# How much of a history index tail is read to name the sessions behind intervening writes.
_INTERVENING_TAIL_BYTES = 256 * KiB
_INTERVENING_KEPT = 16  # the newest intervening writes listed in a result (all are counted)
# Index entries are appended in time order under the path's lock, but stamped just before the file is
# replaced, so an entry may carry a time slightly before the read that missed it.
_INTERVENING_SLACK_S = 1.0
_INTERVENING_FIRST_BYTES = 16 * KiB
# A path whose view was found out of date this recently is "contended": a rebase there is tried before
# taking the lock (see Coordinator._early_rebase).
_CONTENDED_S = 2.0

_SESSION_RE = re.compile(r"^[A-Za-z0-9._:@+/=-]{1,200}$")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


# ---------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadResult:
    path: str
    content: str  # the returned lines, LF line ends, no numbers
    text: str  # numbered rendering for a model (cat -n style), or the short "unchanged" answer
    start_line: int
    num_lines: int
    total_lines: int
    unchanged: bool
    hash: str
    encoding: str
    line_ending: str
    message: str = ""
    notice: str = ""  # "N files you read have changed since: ..." (other files than this one)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WriteResult:
    """Result of a write, edit, multi_edit or undo."""

    path: str
    operation: str
    created: bool
    version: int
    hash: str | None
    message: str
    replacements: int = 0
    start_line: int = 1
    snippet: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # policy "rebase": the edit was carried over onto changes made since this session's view
    rebased: bool = False
    changed_lines: tuple[tuple[int, int], ...] = ()  # what others changed, line ranges of the new file
    intervening: tuple[dict[str, Any], ...] = ()  # the newest of those writes: version, session, lines
    intervening_writes: int = 0  # how many writes by other sessions since this session's view
    intervening_sessions: tuple[str, ...] = ()  # by whom
    notice: str = ""  # "N files you read have changed since: ..." (other files than this one)
    lease_token: int | None = None  # the fencing token of the writer's own lease it was made under

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        d["changed_lines"] = [list(r) for r in self.changed_lines]
        d["intervening"] = [dict(x) for x in self.intervening]
        return d


EditResult = WriteResult


class _RefusalCounts:
    """Refusals by code in this process, added to Redis (`StateStore.error_counts`) on the next post-write
    pipeline: counting costs no round trip of its own."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, code: str) -> None:
        with self._lock:
            self._counts[code] = self._counts.get(code, 0) + 1

    def queue_flush(self, pipe: Any, key: str) -> None:
        with self._lock:
            counts, self._counts = self._counts, {}
        for code, n in counts.items():
            pipe.hincrby(key, code, n)


class _CachedViewRefused(Exception):
    """The cached view of the session does not match the file: look again in Redis before refusing.

    `refusal` is the answer the cached view led to; if Redis holds the same view, it stands (the retry
    would decide the same from the same view), and the second pass under the lock is saved.
    """

    def __init__(self, key: str, cached: ReadState, refusal: CoordinatorError | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.cached = cached
        self.refusal = refusal


class _ViewCache:
    """This process's copy of the read states it recorded itself: (session, path) -> ReadState.

    It saves the Redis round trip before the lock on consecutive edits. It is never trusted to allow what
    Redis would refuse on content grounds: the hash it holds is one this session really saw in this
    process, and the decision is still made against the bytes on disk. Bounded; entries expire with the TTL.
    """

    MAX = 100_000

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._d: dict[tuple[str, str], ReadState] = {}
        self._lock = threading.Lock()

    def get(self, session: str, key: str) -> ReadState | None:
        rs = self._d.get((session, key))
        if rs is not None and time.time() - rs.time > self.ttl_s:
            self.drop(session, key)
            return None
        return rs

    def put(self, session: str, key: str, rs: ReadState) -> None:
        with self._lock:
            if len(self._d) >= self.MAX:
                self._d.clear()
            self._d[(session, key)] = rs

    def drop(self, session: str, key: str) -> None:
        with self._lock:
            self._d.pop((session, key), None)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


class _TextCache:
    """This process's recent file texts by content hash (policy `rebase`): what its sessions read, wrote,
    or saw as their view after a rebased edit. A rebase looks its session's view up here first, then in
    the history's object store (where a coordinator write keeps the pre-image, which is the content read
    by everyone who read the version it replaced). Bounded by total characters, least recently used out.
    """

    def __init__(self, max_chars: int = 64 * MiB) -> None:
        self.max_chars = max_chars
        self._d: OrderedDict[str, str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> str | None:
        with self._lock:
            text = self._d.get(digest)
            if text is not None:
                self._d.move_to_end(digest)
            return text

    def put(self, digest: str, text: str) -> None:
        if len(text) > self.max_chars // 4:
            return
        with self._lock:
            if digest in self._d:
                self._d.move_to_end(digest)
                return
            self._d[digest] = text
            self._chars += len(text)
            while self._chars > self.max_chars and self._d:
                _, old = self._d.popitem(last=False)
                self._chars -= len(old)


@dataclass(frozen=True)
class _Intervening:
    """Other sessions' writes of one path since one session's view: how many, by whom, the newest few."""

    view_time: float
    last_version: int  # newest version looked at
    count: int
    sessions: tuple[str, ...]
    recent: tuple[dict[str, Any], ...]  # oldest first, at most _INTERVENING_KEPT


@dataclass(frozen=True)
class _Walk:
    found: list[dict[str, Any]]  # newest first
    newest: int
    stopped: bool  # found where to stop (so a longer tail would add nothing)
    whole: bool  # saw the whole index
    by_hash: bool  # stopped at the write that made, or replaced, the content the session saw

    def merge(self, known: _Intervening | None, view_time: float) -> _Intervening:
        found = self.found
        if not self.by_hash:
            found = [x for x in found if x["time"] >= view_time]
        fresh = list(reversed(found))
        if known is not None:
            recent = (list(known.recent) + fresh)[-_INTERVENING_KEPT:]
            sessions = tuple(dict.fromkeys([*known.sessions, *(str(x["session"]) for x in fresh)]))
            return _Intervening(
                view_time, max(known.last_version, self.newest), known.count + len(fresh), sessions, tuple(recent)
            )
        sessions = tuple(dict.fromkeys(str(x["session"]) for x in fresh))
        return _Intervening(view_time, self.newest, len(fresh), sessions, tuple(fresh[-_INTERVENING_KEPT:]))


class _Missing(Exception):
    """The file is missing and the operation cannot create it; turned into file_not_found (with its
    "Did you mean" hint) after the lock is released."""


@dataclass
class _Current:
    """The file as found under the lock."""

    exists: bool
    data: bytes = b""
    st: os.stat_result | None = None
    digest: str | None = None
    _decoded: Decoded | None = None

    def decoded(self) -> Decoded:
        if self._decoded is None:
            self._decoded = decode_bytes(self.data)
        return self._decoded


@dataclass
class _Plan:
    """What a transform decided, computed under the lock from the bytes on disk."""

    new_data: bytes | None  # None: remove the file
    new_text: str | None = None
    replacements: int = 0
    first_offset: int = 0
    inserted_len: int = 0
    rebased: rebase.RebaseOutcome | None = None  # set when the edit was carried over (policy rebase)
    view_data: bytes | None = None  # then: the session's new view (what it saw plus its own edit)


# ---------------------------------------------------------------------------------------------------------
# Coordinator
# ---------------------------------------------------------------------------------------------------------
class Coordinator:
    """Coordinates reads and writes of many sessions on one repository root.

    redis_url: None starts (or finds) the embedded Redis in `<root>/.edit-coordinator/`; otherwise a
        `redis://`, `rediss://` or `unix://` URL of a real server.
    durability: "fsync" (default) fsyncs every new file and its folder; "none" relies on the atomic rename.
    lock_timeout: seconds to wait for a file's lock before `lock_timeout`.
    max_file_bytes: hard cap for any file (read or written). max_read_bytes: size above which a read needs
        an explicit limit.
    namespace: names this repository in Redis (default: a hash of the real root path).
    redis_client: an already-made client (e.g. fakeredis in unit tests); overrides redis_url.
    policy: "strict" (default) refuses every edit of a file that changed since the session's view;
        "rebase" carries an edit over onto changes that do not overlap or touch it (see rebase.py). A
        session can choose its own with `session(id, policy=...)`.
    events: publish a change event per write (on the post-write pipeline; no extra round trip).
    notices: let results say which other files the session read have changed since (see events.py).
    state_check: "always" (default) fetches the session's read state from Redis before every write, so a
        Redis that is gone is noticed before anything is written (invariant 3, fail closed). "cached" skips
        that round trip when this process already holds the session's view, and notices a lost Redis from
        its connection instead (a closed socket); in the moments between a server's death and its socket's
        close, an edit can then be written and acknowledged with a warning that the state was not updated.
        Faster on consecutive edits; opt in where that trade is acceptable.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        redis_url: str | None = None,
        *,
        durability: Durability = "fsync",
        policy: Policy = "strict",
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
        state_check: StateCheck = "always",
    ) -> None:
        if durability not in ("fsync", "none"):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "durability must be 'fsync' or 'none'.")
        _check_policy(policy)
        if state_check not in ("always", "cached"):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "state_check must be 'always' or 'cached'.")
        self.state_check: StateCheck = state_check
        root_real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(root_real):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"The root {root_real!r} is not a folder.")
        self.root = root_real
        self.state_dir = layout.ensure_state_dir(state_dir if state_dir else layout.state_dir_of(root_real))
        self.durability: Durability = durability
        self.policy: Policy = policy
        self.fsync = durability == "fsync"
        self.max_file_bytes = max_file_bytes
        self.max_read_bytes = max_read_bytes
        self.default_read_lines = default_read_lines
        self.locks = LockManager(layout.locks_dir(self.state_dir), timeout=lock_timeout)
        self.history_store = History(self.state_dir, fsync=self.fsync)
        self.tmp_dir = layout.tmp_dir(self.state_dir)
        self.tmp_dir.mkdir(exist_ok=True)
        fsio.clean_stale_temps(self.tmp_dir)
        self._tmp_dfd = os.open(self.tmp_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if redis_client is None:
            if redis_url is None:
                from .embedded import ensure_embedded_redis

                redis_url = ensure_embedded_redis(self.state_dir)
            redis_client = connect(redis_url, timeout=redis_timeout)
        self.redis_url = redis_url
        self.redis = redis_client
        self.namespace = namespace or layout.namespace_for(root_real)
        self.state = StateStore(redis_client, self.namespace, ttl_s=read_state_ttl)
        self.read_state_ttl = read_state_ttl
        self._views = _ViewCache(read_state_ttl)
        self._refusals = _RefusalCounts()
        self.lease_store = LeaseStore(redis_client, self.namespace, fence_dir=layout.fences_dir(self.state_dir))
        # (taken at, earliest end among its leases, leases): see LEASE_SNAPSHOT_S
        self._lease_snapshot: tuple[float, float, list[Lease]] | None = None
        self._granted: dict[str, dict[str, Lease]] = {}  # leases this process granted, per session
        self._granted_lock = threading.Lock()
        self.publish_events = events
        self._texts = _TextCache()
        self._seen_writes: dict[tuple[str, str], _Intervening] = {}
        self._contended: dict[str, float] = {}  # path -> when a view of it was last found out of date
        self.tracker = events_mod.ReadTracker() if notices else None
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:  # refusals counted since the last write: best effort, Redis may be gone
            pipe = self.redis.pipeline(transaction=False)
            self._refusals.queue_flush(pipe, self.state.refusals_key)
            if len(pipe):
                pipe.execute()
        except Exception:
            pass
        try:
            os.close(self._tmp_dfd)
        except OSError:
            pass
        self.locks.close()
        try:
            self.redis.close()
        except Exception:
            pass

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public -------------------------------------------------------------------------------------------
    def session(self, session_id: str, policy: Policy | None = None) -> Session:
        """The session with this id. The same id from any process is the same session (shared read state).

        policy: this session's policy ("strict" or "rebase"); None takes the coordinator's.
        """
        _check_session_id(session_id)
        if policy is not None:
            _check_policy(policy)
        return Session(self, session_id, policy)

    def leases(self) -> list[Lease]:
        """Every lease that has not ended, soonest end first."""
        return self.lease_store.live()

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        """Administrator: end one lease (by id) or all leases of a session, whoever holds them."""
        ended = self.lease_store.break_lease(lease_id=lease_id, session=session)
        self._lease_snapshot = None
        return ended

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

    def history(self, path: str) -> list[HistoryEntry]:
        """Versions of `path`, newest first."""
        rp = fsio.resolve(self.root, path)
        return self.history_store.entries(rp.key)

    def resolve(self, path: str) -> fsio.ResolvedPath:
        return fsio.resolve(self.root, path)

    # -- reading ------------------------------------------------------------------------------------------
    def _read(
        self, session: str, path: str, offset: int | None, limit: int | None, policy: Policy = "strict"
    ) -> ReadResult:
        off = _opt_int(offset, "offset", minimum=0)
        lim = _opt_int(limit, "limit", minimum=1)
        rp = fsio.resolve(self.root, path)
        dfd = self._open_parent_or_missing(rp)
        try:
            found = fsio.read_at(dfd, rp, self.max_file_bytes)
        finally:
            os.close(dfd)
        if found is None:
            raise self._missing(rp)
        data, st = found
        if lim is None and len(data) > self.max_read_bytes:
            raise CoordinatorError(
                ErrorCode.TOO_LARGE,
                f"{rp.shown!r} is {len(data)} bytes, more than {self.max_read_bytes} bytes can be read at "
                "once. Read it in parts with offset and limit (for example offset=1, limit=500), or search "
                "it for the part you need.",
                path=rp.key,
                size=len(data),
                limit=self.max_read_bytes,
            )
        decoded = decode_bytes(data)
        digest = content_hash(data)
        lines = semantics.split_lines(decoded.text)
        total = len(lines)
        start = max(off or 1, 1)
        count = lim if lim is not None else self.default_read_lines
        chosen = lines[start - 1 : start - 1 + count]
        ends_with_newline = decoded.text.endswith("\n")
        content = "\n".join(chosen)
        if chosen and (start - 1 + len(chosen) < total or ends_with_newline):
            content += "\n"
        if policy == "rebase":
            # What this session saw, for a later rebase: here in memory; on disk, the next coordinator write
            # keeps these very bytes as its pre-image (shared by every session that read this version).
            self._texts.put(digest, decoded.text)
        now = time.time()
        rs = ReadState(digest, st.st_mtime_ns, st.st_size, off or 0, lim or 0, now, KIND_READ)
        extra, finish = self._notice_extra(session, rp.key)
        prev, replies = self._state_call(lambda: self.state.record_read_with(session, rp.key, rs, extra))
        self._views.put(session, rp.key, rs)
        if self.tracker is not None:
            self.tracker.saw(session, rp.key, digest)
        notice = finish(replies)
        unchanged = (
            prev is not None
            and prev.kind == KIND_READ
            and prev.hash == digest
            and prev.offset == (off or 0)
            and prev.limit == (lim or 0)
        )
        eol = semantics.detect_eol(decoded.text)
        if unchanged:
            text = (
                f"File unchanged since your last read of {rp.shown} (same lines, same content). "
                "What you read before is still current; refer to it instead of reading again."
            )
            message = "unchanged"
        elif total == 0:
            text = f"The file {rp.shown} exists but is empty (0 lines)."
            message = "empty"
        elif start > total:
            text = (
                f"The file {rp.shown} has {total} lines; offset {start} is past the end. "
                f"Use an offset between 1 and {total}."
            )
            message = "offset_past_end"
        else:
            text = semantics.number_lines(chosen, start)
            message = ""
            if start - 1 + len(chosen) < total:
                message = (
                    f"Showing lines {start}-{start + len(chosen) - 1} of {total}; read on with "
                    f"offset={start + len(chosen)}."
                )
        return ReadResult(
            path=rp.key,
            content=content,
            text=text,
            start_line=start,
            num_lines=len(chosen),
            total_lines=total,
            unchanged=unchanged,
            hash=digest,
            encoding=decoded.encoding.value,
            line_ending="crlf" if eol == "\r\n" else "lf",
            message=message,
            notice=notice,
        )

    # -- the check-then-write -----------------------------------------------------------------------------
    def check_then_write(
        self,
        session: str,
        path: str,
        operation: str,
        transform: Callable[[_Current], _Plan],
        *,
        may_create: bool,
        policy: Policy = "strict",
        specs: Sequence[semantics.EditSpec] | None = None,
    ) -> WriteResult:
        """See `_check_then_write`. A refusal made against this process's cached view of the session is
        checked once more against Redis (another process of the same session may have read or written).

        policy "rebase" with `specs` (the edits of an edit / multi_edit): a file that changed since the
        session's view is not refused outright; the edits are carried over if they can be (rebase.py).
        """
        rebase_specs = specs if policy == "rebase" and specs else None
        try:
            try:
                return self._check_then_write(session, path, operation, transform, may_create, True, rebase_specs)
            except _CachedViewRefused as cv:
                if cv.refusal is not None:
                    key = cv.key
                    fresh = self._state_call(lambda: self.state.get(session, key))
                    if fresh is not None and fresh.hash == cv.cached.hash:
                        raise self._decorate_refusal(cv.refusal, key, fresh, session) from None
            return self._check_then_write(session, path, operation, transform, may_create, False, rebase_specs)
        except CoordinatorError as exc:
            self._refusals.add(exc.code.value)
            raise

    def _check_then_write(
        self,
        session: str,
        path: str,
        operation: str,
        transform: Callable[[_Current], _Plan],
        may_create: bool,
        use_cache: bool,
        rebase_specs: Sequence[semantics.EditSpec] | None = None,
    ) -> WriteResult:
        """Run `transform` on the file as it is on disk, under its lock, and write the result atomically.

        `transform` is pure with respect to the outside world: it sees the current bytes and returns the new
        ones, or raises CoordinatorError (then nothing is written). The view check (not_read / stale) is
        made here, against the bytes read under the lock, before `transform` runs; with `rebase_specs`, a
        failed view check becomes an attempt to rebase them instead (still under the lock, local data only).
        """
        rp = fsio.resolve(self.root, path)
        # 1. Outside the lock: S's read state and the leases, in at most one round trip (see `_pre_lock`).
        recorded, use_cache, leased = self._pre_lock(session, rp, use_cache)
        try:
            dfd = fsio.open_parent(rp, self.root, create=may_create)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                raise self._missing(rp) from None
            raise
        try:
            early: tuple[str, _Plan] | None = None
            if rebase_specs is not None and recorded is not None and self._is_contended(rp.key):
                early = self._early_rebase(dfd, rp, recorded, rebase_specs, use_cache)
            # 2. The lock.
            held = self.locks.acquire(rp.key)
            try:
                # 3. Local disk work only: no network I/O while the lock is held.
                found = fsio.read_at(dfd, rp, self.max_file_bytes)
                plan: _Plan | None = None
                if found is None:
                    cur = _Current(exists=False)
                else:
                    data, st = found
                    cur = _Current(exists=True, data=data, st=st, digest=content_hash(data))
                    if recorded is not None and recorded.hash != cur.digest:
                        if len(self._contended) > 100_000:
                            self._contended.clear()
                        self._contended[rp.key] = time.monotonic()
                    if early is not None and early[0] == cur.digest:
                        plan = early[1]  # carried over outside the lock onto these very bytes
                    elif recorded is not None and recorded.hash != cur.digest and rebase_specs is not None:
                        plan = self._rebase_plan(recorded, cur, rebase_specs, rp, use_cache)
                    elif use_cache and recorded.hash != cur.digest:
                        try:
                            _check_view(recorded, cur, rp)
                        except CoordinatorError as exc:
                            raise _CachedViewRefused(rp.key, recorded, exc) from None
                    else:
                        _check_view(recorded, cur, rp)
                if not cur.exists and not may_create:
                    raise _Missing
                if plan is None:
                    plan = transform(cur)
                if plan.new_data is not None and len(plan.new_data) > self.max_file_bytes:
                    raise CoordinatorError(
                        ErrorCode.TOO_LARGE,
                        f"The result would be {len(plan.new_data)} bytes, over the limit of "
                        f"{self.max_file_bytes}; nothing was written.",
                    )
                if leased.own is not None:
                    # Fencing: refused if the lease ran out while we waited, or a later lease wrote here.
                    try:
                        self.lease_store.enforce_fence(rp.key, leased.own)
                    except CoordinatorError:
                        self._forget_grant(session, leased.own.id)
                        raise
                # History first (pre-image, version, index entry): every write stays undoable. A disk error
                # here (a full disk, a read-only state folder) is a refusal like any other: nothing written.
                try:
                    if cur.exists:
                        assert cur.digest is not None and cur.st is not None
                        self.history_store.store_preimage(dfd, rp.name, cur.digest, cur.data)
                        mode = cur.st.st_mode & 0o7777
                        owner = (cur.st.st_uid, cur.st.st_gid) if os.geteuid() == 0 else None
                    else:
                        mode = 0o666 & ~_UMASK
                        owner = None
                    new_digest = None if plan.new_data is None else content_hash(plan.new_data)
                    first_line, last_line = _changed_lines(plan)
                    # The index entry goes in before the file is replaced, so that even a crash right after the
                    # rename leaves the write undoable; if the replace fails, the entry is taken back.
                    # The version counter lives in the lock file; the index tail is the fallback for a lock file
                    # that has none yet (new state folder). Counter first: a crash in between skips a number,
                    # never reuses one.
                    version = (held.read_counter() or self.history_store.last_version(rp.key)) + 1
                    held.write_counter(version)
                    entry = self.history_store.append(
                        rp.key,
                        version,
                        session=session,
                        operation=operation,
                        before=cur.digest,
                        after=new_digest,
                        size_before=len(cur.data),
                        size_after=len(plan.new_data or b""),
                        first_line=first_line,
                        last_line=last_line,
                    )
                except OSError as exc:
                    raise fsio.os_error(exc, rp) from exc
                try:
                    if plan.new_data is None:
                        fsio.remove_at(dfd, rp, self.fsync)
                        new_st = None
                    else:
                        new_st = fsio.atomic_replace(
                            dfd, rp, plan.new_data, mode, self.fsync, tmp_dfd=self._tmp_dfd, owner=owner
                        )
                except BaseException:
                    self.history_store.retract_last(rp.key)
                    held.write_counter(version - 1)
                    raise
            finally:
                hold = held.release()
        except _Missing:
            raise self._missing(rp) from None
        except CoordinatorError as exc:
            raise self._decorate_refusal(exc, rp.key, recorded, session) from None
        finally:
            os.close(dfd)
        # 4. After the lock: S's new read state, P's version and content hash, the change event, and any
        # notices, in one round trip.
        warnings: list[str] = []
        now = time.time()
        view_digest = new_digest
        if plan.rebased is not None and plan.view_data is not None:
            # S's view after a rebased edit never was on disk: it lives in this process's text cache (from
            # another process, or once evicted, S's next edit of P is refused as stale: the safe side).
            view_digest = content_hash(plan.view_data)
            self._texts.put(view_digest, plan.rebased.view)
        elif rebase_specs is not None and new_digest is not None and plan.new_text is not None:
            self._texts.put(new_digest, plan.new_text)
        extra, finish = self._post_write_extra(
            session,
            rp.key,
            entry.version,
            operation,
            [(first_line, last_line)] if new_digest else [],
            now,
            new_digest,
            plan.rebased is not None,
        )
        notice = ""
        try:
            if new_digest is not None and new_st is not None:
                assert view_digest is not None
                if plan.rebased is not None and recorded is not None:
                    # S's view: what it saw plus its own edit. Its time stays that of S's last full view, so
                    # the writes S has not seen are still found as "since then" next time.
                    rs = ReadState(
                        view_digest, new_st.st_mtime_ns, len(plan.view_data or b""), 0, 0, recorded.time, KIND_WRITE
                    )
                else:
                    rs = ReadState(new_digest, new_st.st_mtime_ns, new_st.st_size, 0, 0, now, KIND_WRITE)
                replies = self._state_call(
                    lambda: self.state.record_write(
                        session, rp.key, rs, entry.version, operation, digest=new_digest, extra=extra
                    )
                )
                self._views.put(session, rp.key, rs)
            else:
                self._views.drop(session, rp.key)
                replies = self._state_call(
                    lambda: self.state.record_removal(session, rp.key, entry.version, operation, extra)
                )
            notice = finish(replies)
        except CoordinatorError:
            warnings.append(
                "The change was written, but the coordination state could not be updated; read the file "
                "again before your next edit of it."
            )
        if self.tracker is not None:
            self.tracker.saw(session, rp.key, view_digest)
        snippet = ""
        if plan.new_text is not None and operation != "write":
            snippet = semantics.render_snippet_at(plan.new_text, plan.first_offset, plan.inserted_len, first_line)
        changed_lines: tuple[tuple[int, int], ...] = ()
        seen: _Intervening | None = None
        if plan.rebased is not None and recorded is not None:
            changed_lines = tuple((c.first, c.last) for c in plan.rebased.changes if c.last >= c.first)
            seen = self._intervening(rp.key, recorded, session, before_version=entry.version)
        return WriteResult(
            path=rp.key,
            operation=operation,
            created=not cur.exists,
            version=entry.version,
            hash=new_digest,
            message="",
            replacements=plan.replacements,
            start_line=first_line,
            snippet=snippet,
            timings={"lock_wait_s": held.wait_s, "lock_hold_s": hold},
            warnings=tuple(warnings),
            rebased=plan.rebased is not None,
            changed_lines=changed_lines,
            intervening=seen.recent if seen is not None else (),
            intervening_writes=seen.count if seen is not None else 0,
            intervening_sessions=seen.sessions if seen is not None else (),
            notice=notice,
            lease_token=leased.own.token if leased.own is not None else None,
        )

    def _is_contended(self, key: str) -> bool:
        """Has a view of this path been out of date lately (in this process)?"""
        seen = self._contended.get(key)
        return seen is not None and time.monotonic() - seen < _CONTENDED_S

    def _early_rebase(
        self,
        dfd: int,
        rp: fsio.ResolvedPath,
        recorded: ReadState,
        specs: Sequence[semantics.EditSpec],
        use_cache: bool,
    ) -> tuple[str, _Plan] | None:
        """On a contended path, try the rebase before taking the lock, on the file as it is now.

        A refusal is final (nothing is written, and the bytes it was judged on are a real version of the
        file: writes replace it atomically), so a doomed edit never holds up the lock. A success is kept
        with the hash it was computed on; under the lock it is used only if the file still has that hash.
        """
        found = fsio.read_at(dfd, rp, self.max_file_bytes)
        if found is None:
            return None
        data, st = found
        cur = _Current(exists=True, data=data, st=st, digest=content_hash(data))
        if cur.digest == recorded.hash:
            return None
        plan = self._rebase_plan(recorded, cur, specs, rp, use_cache)
        assert cur.digest is not None
        return cur.digest, plan

    def _rebase_plan(
        self,
        recorded: ReadState,
        cur: _Current,
        specs: Sequence[semantics.EditSpec],
        rp: fsio.ResolvedPath,
        use_cache: bool,
    ) -> _Plan:
        """Under the lock: carry `specs` from S's view (`recorded`) over onto the current file, or raise.

        Local disk and CPU only: the view's content comes from the history's object store. A view whose
        content is gone (retention, or an outside change right after S's own write) gets the strict
        answer. With a cached view, any refusal is first checked against Redis (`_CachedViewRefused`).
        """
        try:
            base_text = self._texts.get(recorded.hash)
            if base_text is None:
                base_text = decode_bytes(self.history_store.load(recorded.hash)).text
            current = cur.decoded()
        except CoordinatorError:
            try:
                _check_view(recorded, cur, rp)  # the strict answer
            except CoordinatorError as strict:
                if use_cache:
                    raise _CachedViewRefused(rp.key, recorded, strict) from None
                raise strict from None
            raise
        try:
            rb = rebase.rebase_edits(base_text, current.text, specs, name=rp.shown)
        except CoordinatorError as exc:
            exc.details["path"] = rp.key
            if use_cache:
                raise _CachedViewRefused(rp.key, recorded, exc) from None
            raise
        out = rb.outcome
        return _Plan(
            new_data=encode_text(out.text, current.encoding),
            new_text=out.text,
            replacements=out.replacements,
            first_offset=out.first_offset,
            inserted_len=out.inserted_len,
            rebased=rb,
            view_data=encode_text(rb.view, current.encoding),
        )

    # -- leases -------------------------------------------------------------------------------------------
    def _pre_lock(
        self, session: str, rp: fsio.ResolvedPath, use_cache: bool
    ) -> tuple[ReadState | None, bool, LeaseCheck]:
        """S's read state for P and what the leases say, with at most one round trip, failing closed.

        Read state: from this process's cache when it has one (a cached view can only err towards a
        refusal, which is then checked against Redis), else from Redis. Leases: from a snapshot at most
        `LEASE_SNAPSHOT_S` old (and refreshed as soon as any lease in it has ended), else fetched on the
        same pipeline as the read state. A conflicting lease raises `leased` here, before the lock.
        """
        use_cache = use_cache and self.state_check == "cached"
        recorded = self._views.get(session, rp.key) if use_cache else None
        leases = self._lease_snapshot_if_fresh()
        if recorded is not None:
            if leases is None:
                leases = self._fetch_leases()  # this round trip also proves Redis is up
            else:
                self._state_call(self.state.alive)
        else:
            use_cache = False
            if leases is None:
                recorded, replies = self._state_call(
                    lambda: self.state.get_with(session, rp.key, self.lease_store.queue_live)
                )
                leases = self._set_lease_snapshot(replies[0])
            else:
                recorded = self._state_call(lambda: self.state.get(session, rp.key))
        return recorded, use_cache, self._lease_decision(session, rp, leases)

    def _lease_snapshot_if_fresh(self) -> list[Lease] | None:
        snap = self._lease_snapshot
        if snap is None:
            return None
        taken, earliest_end, leases = snap
        if time.monotonic() - taken > LEASE_SNAPSHOT_S or time.time() >= earliest_end:
            return None
        return leases

    def _set_lease_snapshot(self, raw: Any) -> list[Lease]:
        leases = self.lease_store.live_from(raw)
        earliest = min((x.ends_at for x in leases), default=float("inf"))
        self._lease_snapshot = (time.monotonic(), earliest, leases)
        return leases

    def _fetch_leases(self) -> list[Lease]:
        replies = self._state_call(lambda: self.state.run_extra(self.lease_store.queue_live))
        return self._set_lease_snapshot(replies[0])

    def _lease_decision(self, session: str, rp: fsio.ResolvedPath, leases: list[Lease]) -> LeaseCheck:
        """Refuse a write that another session's exclusive lease covers; find the writer's own lease (the
        highest token covering P, which fences the write). A lease this process granted to S that is no
        longer live (ran out, released elsewhere, broken) is reported once, as `leased`."""
        check = check_leases(leases, session, rp.key) if leases else LeaseCheck(None, None)
        if check.conflict is not None:
            raise leased_error(check.conflict, rp.shown)
        with self._granted_lock:
            remembered = [x for x in self._granted.get(session, {}).values() if x.covers(rp.key)]
        if not remembered:
            return check
        live_ids = {x.id for x in leases}
        if any(x.id not in live_ids for x in remembered):
            leases = self._fetch_leases()  # the snapshot may predate the grant: look once more
            live_ids = {x.id for x in leases}
            check = check_leases(leases, session, rp.key)
            if check.conflict is not None:
                raise leased_error(check.conflict, rp.shown)
        for lease in remembered:
            if lease.id not in live_ids:
                self._forget_grant(session, lease.id)
                when = time.strftime("%H:%M:%S", time.localtime(lease.ends_at))
                raise CoordinatorError(
                    ErrorCode.LEASED,
                    f"Your {lease.mode} lease on {lease.pattern!r} (token {lease.token}) has ended: it ran out at "
                    f"{when}, or was released or broken. Nothing was written to {rp.shown}. Lease it again and "
                    "read the file again before changing it (another session may have changed it); or, if you "
                    "no longer need the lease, just make the change again.",
                    path=rp.key,
                    lease_id=lease.id,
                    token=lease.token,
                )
        return check

    def _forget_grant(self, session: str, lease_id: str) -> None:
        with self._granted_lock:
            mine = self._granted.get(session)
            if mine is not None:
                mine.pop(lease_id, None)
                if not mine:
                    del self._granted[session]

    def _lease(self, session: str, patterns: Sequence[str], mode: str, ttl_s: float) -> list[Lease]:
        pats = [normalize_pattern(p, self.root) for p in patterns]
        granted = self.lease_store.grant(session, pats, mode, ttl_s)
        with self._granted_lock:
            mine = self._granted.setdefault(session, {})
            for old_id in [i for i, x in mine.items() if x.pattern in set(pats)]:
                del mine[old_id]
            mine.update({x.id: x for x in granted})
        self._lease_snapshot = None
        # Every process's lease snapshot taken before the grant is dropped within LEASE_SNAPSHOT_S: only
        # then may the holder rely on the lease.
        time.sleep(LEASE_SNAPSHOT_S)
        return granted

    def _renew(self, session: str, lease_id: str | None, ttl_s: float) -> list[Lease]:
        ids = [lease_id] if lease_id else [x.id for x in self.lease_store.live() if x.session == session]
        out = [self.lease_store.renew(session, i, ttl_s) for i in ids]
        with self._granted_lock:
            mine = self._granted.get(session, {})
            for x in out:
                if x.id in mine:
                    mine[x.id] = x
        self._lease_snapshot = None
        return out

    def _release(self, session: str, lease_id: str | None, pattern: str | None) -> int:
        pat = normalize_pattern(pattern, self.root) if pattern is not None else None
        n = self.lease_store.release(session, lease_id=lease_id, pattern=pat)
        with self._granted_lock:
            mine = self._granted.get(session, {})
            ended = [i for i, x in mine.items() if lease_id in (None, i) and pat in (None, x.pattern)]
            for i in ended:
                del mine[i]
        self._lease_snapshot = None
        return n

    # -- events, notices, intervening writes ---------------------------------------------------------------
    def _notice_extra(self, session: str, key: str) -> tuple[Callable[[Any], None] | None, Callable[[list[Any]], str]]:
        """The notice lookups to add to a pipeline the call makes anyway, and how to read their replies."""
        tracker = self.tracker
        keys = tracker.due(session, exclude=key) if tracker is not None else []
        if not keys or tracker is None:
            return None, _no_notice
        meta_keys = [self.state.meta_key(k) for k in keys]

        def extra(pipe: Any) -> None:
            for mk in meta_keys:
                pipe.hmget(mk, "hash", "writer")

        def finish(replies: list[Any]) -> str:
            found = tracker.notice(session, keys, replies[-len(keys) :])
            return found.text if found is not None else ""

        return extra, finish

    def _post_write_extra(
        self,
        session: str,
        key: str,
        version: int,
        operation: str,
        ranges: list[tuple[int, int]],
        when: float,
        digest: str | None,
        rebased: bool,
    ) -> tuple[Callable[[Any], None] | None, Callable[[list[Any]], str]]:
        notice_extra, finish = self._notice_extra(session, key)
        if not self.publish_events:

            def counts_and_notices(pipe: Any) -> None:
                self._refusals.queue_flush(pipe, self.state.refusals_key)
                if notice_extra is not None:
                    notice_extra(pipe)

            return counts_and_notices, finish

        def extra(pipe: Any) -> None:
            self._refusals.queue_flush(pipe, self.state.refusals_key)
            events_mod.queue_event(
                pipe,
                self.namespace,
                path=key,
                session=session,
                version=version,
                operation=operation,
                ranges=ranges,
                when=when,
                digest=digest,
                rebased=rebased,
            )
            if notice_extra is not None:
                notice_extra(pipe)

        return extra, finish

    def _intervening(
        self, key: str, recorded: ReadState, session: str, before_version: int | None = None
    ) -> _Intervening:
        """Writes of `key` by other sessions since S's view (S has not seen them), from the history index.

        Walking back from the newest entry, the walk stops at the write that produced the content S saw
        (its `after` is S's hash), or just after the first write made over it (its `before` is). A view
        that never was on disk (S's own rebased edit) matches neither; then the writes stamped after the
        time of S's last full view count, and the walk stops at entries older than that. What an earlier
        call for the same view already counted is kept (per process), so a session that edits again and
        again without reading walks only the entries that are new since its last edit.
        """
        cache_key = (session, key)
        known = self._seen_writes.get(cache_key)
        if known is not None and known.view_time != recorded.time:
            known = None
        path = self.history_store.index_path(key)
        size = _INTERVENING_FIRST_BYTES
        while True:
            walk = self._walk_index_tail(path, size, recorded, session, before_version, known)
            if walk.stopped or walk.whole or size >= _INTERVENING_TAIL_BYTES:
                break
            size *= 4
        merged = walk.merge(known, recorded.time)
        if len(self._seen_writes) > 10_000:
            self._seen_writes.clear()
        self._seen_writes[cache_key] = merged
        return merged

    def _walk_index_tail(
        self,
        path: str,
        size: int,
        recorded: ReadState,
        session: str,
        before_version: int | None,
        known: _Intervening | None,
    ) -> _Walk:
        try:
            with open(path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                start = max(0, end - size)
                f.seek(start)
                tail = f.read()
        except OSError:
            return _Walk([], 0, True, True, True)
        lines = tail.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first one is cut
        found: list[dict[str, Any]] = []
        newest = 0
        for raw in reversed(lines):
            try:
                e = json.loads(raw)
                version = int(e["version"])
                when = float(e.get("time") or 0.0)
            except (ValueError, KeyError, TypeError):
                continue
            if before_version is not None and version >= before_version:
                continue
            newest = max(newest, version)
            if known is not None and version <= known.last_version:
                return _Walk(found, newest, True, start == 0, False)
            if e.get("after") == recorded.hash:
                return _Walk(found, newest, True, start == 0, True)
            if when < recorded.time - _INTERVENING_SLACK_S:
                return _Walk(found, newest, True, start == 0, False)  # older than S's view: the rest too
            if e.get("session") != session:
                found.append(
                    {
                        "version": version,
                        "session": e.get("session"),
                        "operation": e.get("operation"),
                        "time": when,
                        "first_line": e.get("first_line"),
                        "last_line": e.get("last_line"),
                    }
                )
            if e.get("before") == recorded.hash:
                return _Walk(found, newest, True, start == 0, True)
        return _Walk(found, newest, False, start == 0, False)

    def _intervening_detail(self, key: str, recorded: ReadState, session: str, exc: CoordinatorError) -> str:
        seen = self._intervening(key, recorded, session)
        exc.details["intervening"] = list(seen.recent)
        exc.details["intervening_writes"] = seen.count
        if not seen.count:
            return ""
        return " Changed since your view by: " + _describe_writes(seen) + "."

    # -- helpers ------------------------------------------------------------------------------------------
    def _state_call(self, fn: Callable[[], _T]) -> _T:
        """Every Redis call goes through here: on losing Redis, forget every cached view (the read state
        may be gone with the server, so sessions read again once it is back)."""
        try:
            return fn()
        except CoordinatorError as exc:
            if exc.code == ErrorCode.STATE_UNAVAILABLE:
                self._views.clear()
            raise

    def _open_parent_or_missing(self, rp: fsio.ResolvedPath) -> int:
        try:
            return fsio.open_parent(rp, self.root)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                raise self._missing(rp) from None
            raise

    def _missing(self, rp: fsio.ResolvedPath) -> CoordinatorError:
        """file_not_found with a "Did you mean" hint (computed outside any lock)."""
        hint = None
        try:
            names = os.listdir(rp.parent)
        except OSError:
            names = []
        suggestion = semantics.suggest_path(rp.name, names)
        if suggestion is not None:
            rel = os.path.relpath(os.path.join(rp.parent, suggestion), self.root)
            hint = rel.replace(os.sep, "/")
        msg = f"File does not exist: {rp.shown}."
        if hint:
            msg += f" Did you mean {hint}?"
        else:
            msg += " Check the path (it is relative to the repository root), or create the file with Write."
        return CoordinatorError(ErrorCode.FILE_NOT_FOUND, msg, path=rp.key, suggestion=hint)

    def _decorate_refusal(
        self, exc: CoordinatorError, key: str, recorded: ReadState | None, session: str
    ) -> CoordinatorError:
        """Say who changed the file in a `stale` refusal (after the lock: these lookups may do I/O)."""
        if exc.code == ErrorCode.STALE:
            if "changes" in exc.details and recorded is not None:  # a refused rebase: name who changed it
                exc.message += self._intervening_detail(key, recorded, session, exc)
            else:
                exc.message += self._stale_detail(key)
        return exc

    def _stale_detail(self, key: str) -> str:
        try:
            meta = self.state.meta(key)
        except CoordinatorError:
            return ""
        if not meta.get("version"):
            return ""
        return f" Now version {meta['version']}, last written by session {meta.get('writer', '?')}."


def _check_view(recorded: ReadState | None, cur: _Current, rp: fsio.ResolvedPath) -> None:
    """The staleness rule: content decides. Enforced under the lock, against the bytes on disk."""
    if recorded is None:
        raise CoordinatorError(
            ErrorCode.NOT_READ,
            f"{rp.shown} has not been read by this session yet (or its read state has expired). "
            "Read it first, then make your change.",
            path=rp.key,
        )
    if recorded.hash != cur.digest:
        raise CoordinatorError(
            ErrorCode.STALE,
            f"{rp.shown} has been modified since you last read it (by another session or an outside "
            "program). Read it again before editing, then redo your change on the current content.",
            path=rp.key,
        )


def _no_notice(replies: list[Any]) -> str:
    return ""


def _describe_writes(seen: _Intervening) -> str:
    """ "agent-3 (version 12, lines 40-42), agent-5 (version 13, line 80)" (lines of that version), newest
    last; older ones summed up."""
    shown = list(seen.recent)[-6:]
    parts = []
    for w in shown:
        a, b = w.get("first_line"), w.get("last_line")
        where = f", line {a}" if a == b else f", lines {a}-{b}" if a and b else ""
        parts.append(f"{w.get('session')} (version {w.get('version')}{where})")
    if seen.count > len(shown):
        parts.insert(0, f"{seen.count - len(shown)} earlier writes")
    return ", ".join(parts)


def _check_policy(policy: object) -> None:
    if policy not in POLICIES:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"Unknown policy {policy!r}; use 'strict' (the default) or 'rebase'."
        )


def _check_session_id(session_id: object) -> None:
    if not isinstance(session_id, str) or not _SESSION_RE.match(session_id):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "A session id is 1-200 characters from letters, digits and . _ : @ + / = -",
        )


def _changed_lines(plan: _Plan) -> tuple[int, int]:
    if plan.new_text is None:
        return 1, 1
    first = semantics.line_number_at(plan.new_text, plan.first_offset)
    inserted = plan.new_text[plan.first_offset : plan.first_offset + plan.inserted_len]
    return first, first + max(inserted.count("\n") - (1 if inserted.endswith("\n") else 0), 0)


def _opt_int(v: object, name: str, minimum: int) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a whole number or omitted.")
    if v < minimum:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be at least {minimum}; got {v}.")
    return v


def _check_text(v: object, name: str, limit: int) -> str:
    if not isinstance(v, str):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a string.")
    if len(v) > limit:
        raise CoordinatorError(ErrorCode.TOO_LARGE, f"{name} is longer than the limit of {limit} characters.")
    if "\x00" in v:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} contains a NUL byte; text files cannot hold one.")
    return v


# ---------------------------------------------------------------------------------------------------------
# Session
# ---------------------------------------------------------------------------------------------------------
class Session:
    """One agent session. Cheap to create; all its state lives in Redis.

    policy: "strict" or "rebase" for this session's edits (None: the coordinator's).
    """

    def __init__(self, coord: Coordinator, session_id: str, policy: Policy | None = None) -> None:
        self.coord = coord
        self.id = session_id
        self.policy: Policy = policy if policy is not None else coord.policy

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        """Read lines of a text file; records this session's view of the whole file."""
        return self.coord._read(self.id, path, offset, limit, self.policy)

    # -- leases -------------------------------------------------------------------------------------------
    def lease(self, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = 300.0) -> list[Lease]:
        """Reserve paths or globs (`src/app.py`, `src/**/*.py`, `docs/`) for `ttl_s` seconds, all or none.

        exclusive: other sessions' writes, edits and undos of covered paths are refused with `leased`
        (reads stay free). shared: only other sessions' exclusive leases are kept out. Refused with `leased`
        when another session holds a conflicting lease. Renew before the end with `renew`; a lease that
        ran out refuses this session's next write under it once (fencing), so lease again and read again.
        """
        patterns = [paths] if isinstance(paths, str) else list(paths)
        return self.coord._lease(self.id, patterns, mode, ttl_s)

    def renew(self, lease_id: str | None = None, ttl_s: float = 300.0) -> list[Lease]:
        """Extend one live lease (or all of this session's) to end `ttl_s` from now; same tokens."""
        return self.coord._renew(self.id, lease_id, ttl_s)

    def release(self, lease_id: str | None = None, pattern: str | None = None) -> int:
        """End this session's leases: one by id, those on one pattern, or all. Returns how many ended."""
        return self.coord._release(self.id, lease_id, pattern)

    def leases(self) -> list[Lease]:
        """This session's live leases."""
        return [x for x in self.coord.lease_store.live() if x.session == self.id]

    def write(self, path: str, content: str) -> WriteResult:
        """Create or overwrite a file. An existing file must have been read, and be unchanged since."""
        content = _check_text(content, "content", self.coord.max_file_bytes)

        def transform(cur: _Current) -> _Plan:
            encoding = cur.decoded().encoding if cur.exists else Encoding.UTF8
            new = encode_text(content, encoding)
            return _Plan(new_data=new, new_text=content, replacements=0, inserted_len=len(content))

        res = self.coord.check_then_write(self.id, path, "write", transform, may_create=True, policy=self.policy)
        verb = "created" if res.created else "updated"
        return _with_message(res, f"File {verb} successfully at: {res.path}")

    def edit(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        """Replace `old_string` with `new_string` (exactly once, or every time with replace_all)."""
        limit = self.coord.max_file_bytes
        old = _check_text(old_string, "old_string", limit)
        new = _check_text(new_string, "new_string", limit)
        if not isinstance(replace_all, bool):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "replace_all must be true or false.")
        if old == new:
            raise CoordinatorError(
                ErrorCode.NO_CHANGE,
                "old_string and new_string are the same, so there is nothing to change. Give the new text "
                "in new_string.",
            )
        return self._edits(path, [semantics.EditSpec(old, new, replace_all)], "edit")

    def multi_edit(self, path: str, edits: Sequence[dict[str, Any] | semantics.EditSpec]) -> WriteResult:
        """Several edits of one file, applied in order, all or nothing, in one critical section."""
        if not isinstance(edits, Sequence) or isinstance(edits, str | bytes) or not edits:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "edits must be a non-empty list of edits.")
        limit = self.coord.max_file_bytes
        specs: list[semantics.EditSpec] = []
        for i, e in enumerate(edits):
            if isinstance(e, semantics.EditSpec):
                specs.append(e)
                continue
            if not isinstance(e, dict) or "old_string" not in e or "new_string" not in e:
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"edits[{i}] must be an object with old_string, new_string and optional replace_all.",
                )
            ra = e.get("replace_all", False)
            if not isinstance(ra, bool):
                raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"edits[{i}].replace_all must be a bool.")
            specs.append(
                semantics.EditSpec(
                    _check_text(e["old_string"], f"edits[{i}].old_string", limit),
                    _check_text(e["new_string"], f"edits[{i}].new_string", limit),
                    ra,
                )
            )
        return self._edits(path, specs, "multi_edit")

    def _edits(self, path: str, specs: list[semantics.EditSpec], operation: str) -> WriteResult:
        creating = specs[0].old_string == ""

        def transform(cur: _Current) -> _Plan:
            if not cur.exists:
                if not creating:
                    raise _Missing
                text, encoding = "", Encoding.UTF8
            else:
                d = cur.decoded()
                text, encoding = d.text, d.encoding
            out = semantics.apply_edits(text, specs) if len(specs) > 1 else _one(text, specs[0])
            return _Plan(
                new_data=encode_text(out.text, encoding),
                new_text=out.text,
                replacements=out.replacements,
                first_offset=out.first_offset,
                inserted_len=out.inserted_len,
            )

        res = self.coord.check_then_write(
            self.id, path, operation, transform, may_create=creating, policy=self.policy, specs=specs
        )
        if res.created:
            return _with_message(res, f"Created {res.path}.")
        n = res.replacements
        msg = f"The file {res.path} has been updated ({n} replacement{'s' if n != 1 else ''})."
        if res.rebased:
            msg += " " + _rebase_sentence(res)
        return _with_message(res, msg, f"Snippet (around line {res.start_line} after the edit):")

    def undo(self, path: str, version: int | None = None) -> WriteResult:
        """Restore `path` to its content just before a recorded write.

        version=None: before this session's last write of `path`. version=N: before version N was written
        (so N and everything after it are undone). The restore runs through the check-then-write: it needs
        this session's current view of the file, and is itself recorded in history (and so undoable).
        """
        version = _opt_int(version, "version", minimum=1)
        rp = self.coord.resolve(path)
        entries = self.coord.history_store.entries(rp.key)
        if version is None:
            target = next((e for e in entries if e.session == self.id), None)
            if target is None:
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"This session has no recorded write of {rp.shown} to undo. Pass a version from its "
                    "history instead.",
                )
        else:
            target = next((e for e in entries if e.version == version), None)
            if target is None:
                known = ", ".join(str(e.version) for e in entries[:10]) or "none"
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{rp.shown} has no version {version} (newest versions: {known}).",
                )
        restore = None if target.before is None else self.coord.history_store.load(target.before)

        def transform(cur: _Current) -> _Plan:
            if restore is None:
                if not cur.exists:
                    raise CoordinatorError(ErrorCode.NO_CHANGE, f"{rp.shown} is already absent.")
                return _Plan(new_data=None)
            if cur.exists and cur.data == restore:
                raise CoordinatorError(
                    ErrorCode.NO_CHANGE,
                    f"{rp.shown} already has the content it had before version {target.version}.",
                )
            try:
                text = decode_bytes(restore).text
            except CoordinatorError:
                text = None
            return _Plan(new_data=restore, new_text=text, inserted_len=len(text or ""))

        res = self.coord.check_then_write(self.id, path, "undo", transform, may_create=True, policy=self.policy)
        what = "removed (it did not exist before)" if res.hash is None else "restored"
        return _with_message(
            res,
            f"{res.path} {what}: back to its content before version {target.version} (now version {res.version}).",
        )


def _one(text: str, spec: semantics.EditSpec) -> semantics.EditOutcome:
    return semantics.apply_edit(text, spec.old_string, spec.new_string, spec.replace_all)


def _with_message(res: WriteResult, message: str, tail: str = "") -> WriteResult:
    from dataclasses import replace

    if res.warnings:
        message += " Warning: " + " ".join(res.warnings)
    if res.notice:
        message += " Note: " + res.notice
    if tail:
        message += " " + tail
    return replace(res, message=message)


def _rebase_sentence(res: WriteResult) -> str:
    """What a rebased edit tells the agent: it went through on top of others' changes it has not seen."""
    n = res.intervening_writes
    who = list(res.intervening_sessions[:6])
    if len(res.intervening_sessions) > 6:
        who.append(f"{len(res.intervening_sessions) - 6} more")
    spans = [f"{a}" if a == b else f"{a}-{b}" for a, b in res.changed_lines[:8]]
    if not spans:
        where = ""
    elif len(spans) == 1 and "-" not in spans[0]:
        where = f"; now at line {spans[0]}"
    else:
        where = f"; now at lines {', '.join(spans)}"
    writes = f"{n} write{'s' if n != 1 else ''} by {', '.join(who)}" if n else "other writes"
    return (
        f"The file had changed since you read it ({writes}{where}), away from the lines you "
        "edited, so your edit was applied on top of those changes. You have not seen them: read those lines "
        "before relying on them."
    )
