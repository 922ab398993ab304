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
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import redis

from . import fsio, semantics
from .errors import CoordinatorError, ErrorCode
from .history import History, HistoryEntry, content_hash
from .locks import LockManager
from .state import KIND_READ, KIND_WRITE, ReadState, StateStore, connect, path_hash
from .textio import Decoded, Encoding, decode_bytes, encode_text

_T = TypeVar("_T")

KiB = 1024
MiB = 1024 * KiB

Durability = Literal["fsync", "none"]
Policy = Literal["strict"]

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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        return d


EditResult = WriteResult


class _CachedViewRefused(Exception):
    """The cached view of the session does not match the file: look again in Redis before refusing."""


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
    ) -> None:
        if durability not in ("fsync", "none"):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "durability must be 'fsync' or 'none'.")
        if policy != "strict":
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Unknown policy {policy!r}; use 'strict'.")
        root_real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(root_real):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"The root {root_real!r} is not a folder.")
        self.root = root_real
        self.state_dir = Path(state_dir) if state_dir else Path(root_real) / fsio.STATE_DIR_NAME
        _ensure_state_dir(self.state_dir)
        self.durability: Durability = durability
        self.policy: Policy = policy
        self.fsync = durability == "fsync"
        self.max_file_bytes = max_file_bytes
        self.max_read_bytes = max_read_bytes
        self.default_read_lines = default_read_lines
        self.locks = LockManager(self.state_dir / "locks", timeout=lock_timeout)
        self.history_store = History(self.state_dir, fsync=self.fsync)
        self.tmp_dir = self.state_dir / "tmp"
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
        self.namespace = namespace or path_hash(root_real)
        self.state = StateStore(redis_client, self.namespace, ttl_s=read_state_ttl)
        self.read_state_ttl = read_state_ttl
        self._views = _ViewCache(read_state_ttl)
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
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
    def session(self, session_id: str) -> Session:
        """The session with this id. The same id from any process is the same session (shared read state)."""
        if not isinstance(session_id, str) or not _SESSION_RE.match(session_id):
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                "A session id is 1-200 characters from letters, digits and . _ : @ + / = -",
            )
        return Session(self, session_id)

    def history(self, path: str) -> list[HistoryEntry]:
        """Versions of `path`, newest first."""
        rp = fsio.resolve(self.root, path)
        return self.history_store.entries(rp.key)

    def resolve(self, path: str) -> fsio.ResolvedPath:
        return fsio.resolve(self.root, path)

    # -- reading ------------------------------------------------------------------------------------------
    def _read(self, session: str, path: str, offset: int | None, limit: int | None) -> ReadResult:
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
        now = time.time()
        rs = ReadState(digest, st.st_mtime_ns, st.st_size, off or 0, lim or 0, now, KIND_READ)
        prev = self._state_call(lambda: self.state.record_read(session, rp.key, rs))
        self._views.put(session, rp.key, rs)
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
    ) -> WriteResult:
        """See `_check_then_write`. A refusal made against this process's cached view of the session is
        checked once more against Redis (another process of the same session may have read or written)."""
        try:
            return self._check_then_write(session, path, operation, transform, may_create, use_cache=True)
        except _CachedViewRefused:
            return self._check_then_write(session, path, operation, transform, may_create, use_cache=False)

    def _check_then_write(
        self,
        session: str,
        path: str,
        operation: str,
        transform: Callable[[_Current], _Plan],
        may_create: bool,
        use_cache: bool,
    ) -> WriteResult:
        """Run `transform` on the file as it is on disk, under its lock, and write the result atomically.

        `transform` is pure with respect to the outside world: it sees the current bytes and returns the new
        ones, or raises CoordinatorError (then nothing is written). The view check (not_read / stale) is
        made here, against the bytes read under the lock, before `transform` runs.
        """
        rp = fsio.resolve(self.root, path)
        # 1. Outside the lock: S's read state, from this process's cache when it has one (a cached view can
        # only err towards a refusal, which is then checked against Redis), else from Redis. Either way the
        # call fails closed if Redis is unreachable.
        recorded = self._views.get(session, rp.key) if use_cache else None
        if recorded is not None:
            self._state_call(self.state.alive)
        else:
            use_cache = False
            recorded = self._state_call(lambda: self.state.get(session, rp.key))
        try:
            dfd = fsio.open_parent(rp, self.root, create=may_create)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                raise self._missing(rp) from None
            raise
        try:
            # 2. The lock.
            held = self.locks.acquire(rp.key)
            try:
                # 3. Local disk work only: no network I/O while the lock is held.
                found = fsio.read_at(dfd, rp, self.max_file_bytes)
                if found is None:
                    cur = _Current(exists=False)
                else:
                    data, st = found
                    cur = _Current(exists=True, data=data, st=st, digest=content_hash(data))
                    if use_cache and recorded.hash != cur.digest:
                        raise _CachedViewRefused
                    _check_view(recorded, cur, rp)
                if not cur.exists and not may_create:
                    raise _Missing
                plan = transform(cur)
                if plan.new_data is not None and len(plan.new_data) > self.max_file_bytes:
                    raise CoordinatorError(
                        ErrorCode.TOO_LARGE,
                        f"The result would be {len(plan.new_data)} bytes, over the limit of "
                        f"{self.max_file_bytes}; nothing was written.",
                    )
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
            if exc.code == ErrorCode.STALE:
                exc.message += self._stale_detail(rp.key)
            raise
        finally:
            os.close(dfd)
        # 4. After the lock: S's new read state and P's version.
        warnings: list[str] = []
        now = time.time()
        try:
            if new_digest is not None and new_st is not None:
                rs = ReadState(new_digest, new_st.st_mtime_ns, new_st.st_size, 0, 0, now, KIND_WRITE)
                self._state_call(lambda: self.state.record_write(session, rp.key, rs, entry.version, operation))
                self._views.put(session, rp.key, rs)
            else:
                self._views.drop(session, rp.key)
                self._state_call(lambda: self.state.forget(session, rp.key))
        except CoordinatorError:
            warnings.append(
                "The change was written, but the coordination state could not be updated; read the file "
                "again before your next edit of it."
            )
        snippet = ""
        if plan.new_text is not None and operation != "write":
            snippet = semantics.render_snippet_at(plan.new_text, plan.first_offset, plan.inserted_len, first_line)
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
        )

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
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"{name} contains a NUL byte; text files cannot hold one."
        )
    return v


def _ensure_state_dir(state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    gi = state_dir / ".gitignore"
    if not gi.exists():
        try:
            gi.write_text("*\n")
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------------------
# Session
# ---------------------------------------------------------------------------------------------------------
class Session:
    """One agent session. Cheap to create; all its state lives in Redis."""

    def __init__(self, coord: Coordinator, session_id: str) -> None:
        self.coord = coord
        self.id = session_id

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        """Read lines of a text file; records this session's view of the whole file."""
        return self.coord._read(self.id, path, offset, limit)

    def write(self, path: str, content: str) -> WriteResult:
        """Create or overwrite a file. An existing file must have been read, and be unchanged since."""
        content = _check_text(content, "content", self.coord.max_file_bytes)

        def transform(cur: _Current) -> _Plan:
            encoding = cur.decoded().encoding if cur.exists else Encoding.UTF8
            new = encode_text(content, encoding)
            return _Plan(new_data=new, new_text=content, replacements=0, inserted_len=len(content))

        res = self.coord.check_then_write(self.id, path, "write", transform, may_create=True)
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

        res = self.coord.check_then_write(self.id, path, operation, transform, may_create=creating)
        if res.created:
            msg = f"Created {res.path}."
        else:
            n = res.replacements
            msg = (
                f"The file {res.path} has been updated ({n} replacement{'s' if n != 1 else ''}). "
                f"Snippet (around line {res.start_line} after the edit):"
            )
        return _with_message(res, msg)

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

        res = self.coord.check_then_write(self.id, path, "undo", transform, may_create=True)
        what = "removed (it did not exist before)" if res.hash is None else "restored"
        return _with_message(
            res,
            f"{res.path} {what}: back to its content before version {target.version} "
            f"(now version {res.version}).",
        )


def _one(text: str, spec: semantics.EditSpec) -> semantics.EditOutcome:
    return semantics.apply_edit(text, spec.old_string, spec.new_string, spec.replace_all)


def _with_message(res: WriteResult, message: str) -> WriteResult:
    from dataclasses import replace

    if res.warnings:
        message += " Warning: " + " ".join(res.warnings)
    return replace(res, message=message)
