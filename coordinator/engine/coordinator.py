"""Coordinator: one repository root, its state folder, its Redis, its caches."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from .. import events as events_mod
from .. import fsio, layout, retention, semantics
from ..arguments import check_policy as _check_policy
from ..arguments import check_session_id as _check_session_id
from ..arguments import opt_int as _opt_int
from ..errors import CoordinatorError, ErrorCode
from ..history import History, HistoryEntry, content_hash
from ..leases import Lease, LeaseStore, normalize_pattern
from ..locks import LockManager
from ..state import KIND_READ, ReadState, StateStore, connect
from ..textio import decode_bytes
from .caches import _RefusalCounts, _TextCache, _ViewCache
from .options import Durability, KiB, MiB, Policy, StateCheck
from .results import ReadResult
from .session import Session
from .write import _WriteSteps

if TYPE_CHECKING:
    from .intervening import _Intervening

_T = TypeVar("_T")


class Coordinator(_WriteSteps):
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
                from ..embedded import ensure_embedded_redis

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
        self.history_store.close()
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
        """Versions of `path` that reached the file, newest first."""
        rp = fsio.resolve(self.root, path)
        entries = self.history_store.entries(rp.key)
        if entries and retention.settle(self.state_dir, rp.key, self.root, self.locks):
            entries = self.history_store.entries(rp.key)
        return entries

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
        names = fsio.list_parent(rp, self.root)  # through a checked descriptor: never an outside folder's names
        suggestion = semantics.suggest_path(rp.name, names)
        if suggestion is not None:
            folder = rp.key.rpartition("/")[0]
            hint = f"{folder}/{suggestion}" if folder else suggestion
        msg = f"File does not exist: {rp.shown}."
        if hint:
            msg += f" Did you mean {hint}?"
        else:
            msg += " Check the path (it is relative to the repository root), or create the file with Write."
        return CoordinatorError(ErrorCode.FILE_NOT_FOUND, msg, path=rp.key, suggestion=hint)


def _no_notice(replies: list[Any]) -> str:
    return ""
