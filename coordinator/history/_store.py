"""The history store: writes under the path's lock, reads, and content loads (see __init__)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coordinator import clock
from coordinator.disk.layout import history_dir
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.hashing import file_stem
from coordinator.history._format import (
    _FAULT,
    _MAX_OPEN,
    _PACK_HEADER,
    _PACK_MAGIC,
    _TAIL_BLOCK,
    HistoryEntry,
    IndexFile,
    Loc,
    LockFile,
    PendingWrite,
    TailRead,
    _escape,
    _fields_line,
    _Head,
    _header_generation,
    _Line,
    _parse_into,
    _parse_lines,
    _pread_file,
    _write_all,
    _writev_all,
    content_hash,
)
from coordinator.history._gc import _Rewrite

_lseek, _SEEK_END, _pread, _write = os.lseek, os.SEEK_END, os.pread, os.write
_pack_header, _fromhex, _HEADER_SIZE = _PACK_HEADER.pack, bytes.fromhex, _PACK_HEADER.size


class _Handles:
    """One path's append descriptors, valid while the head's generation is `token`, and the key's part of
    its index lines (`path_json`, the key as a JSON string), formatted once.

    Invariant: the descriptors are closed once, when the last reference to the handle goes (evicted or
    superseded in `History._open` and no write using it any more) or by `History.close`; a write holding
    the handle never finds them closed by another thread's eviction."""

    __slots__ = ("end_version", "index_end", "index_fd", "key", "pack_fd", "pack_gen", "path_json", "token")

    def __init__(self, key: str, index_fd: int, pack_fd: int, pack_gen: int, token: int) -> None:
        self.key = key
        self.path_json = _escape(key)
        self.index_fd = index_fd
        self.pack_fd = pack_fd
        self.pack_gen = pack_gen
        self.token = token
        # Where this process's last index line through these descriptors ended, and its version: while the
        # head's counter is still that version, no begin has run since (every begin raises the counter
        # before it appends), so the index ends with that whole line (`History.begin`).
        self.index_end = -1
        self.end_version = -1

    def close(self) -> None:
        fds, self.index_fd, self.pack_fd = (self.index_fd, self.pack_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit the modules it uses may be gone already
            pass


class History(_Rewrite):
    def __init__(self, state_dir: Path, fsync: bool = True) -> None:
        self.base = history_dir(state_dir)
        self.objects = self.base / "objects"
        self.index = self.base / "index"
        self.packs = self.base / "packs"
        for d in (self.index, self.packs):
            d.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._index_str = str(self.index)
        self._packs_str = str(self.packs)
        self._open: OrderedDict[str, _Handles] = OrderedDict()
        self._open_lock = threading.Lock()
        self._locs: dict[tuple[str, str], tuple[int, Loc]] = {}  # (key, digest) -> (generation, location)

    # -- names --------------------------------------------------------------------------------------------
    def index_path(self, key: str) -> str:
        return f"{self._index_str}/{file_stem(key)}.jsonl"

    def _index_file(self, name: str) -> str:
        return f"{self._index_str}/{name}.jsonl"

    def _pack_file(self, name: str, gen: int) -> str:
        return f"{self._packs_str}/{name}.{gen}.pack"

    def object_path(self, digest: str) -> Path:
        """Where an earlier version kept a content as a file of its own."""
        return self.objects / digest[:2] / digest

    def close(self) -> None:
        with self._open_lock:
            for h in self._open.values():
                h.close()
            self._open.clear()

    # -- writing (under the path's lock) ------------------------------------------------------------------
    def begin(
        self,
        held: LockFile,
        key: str,
        *,
        before: bytes | None,
        before_digest: str | None,
        after: bytes | None,
        after_digest: str | None,
        session: str,
        operation: str,
        size_before: int,
        size_after: int,
        first_line: int,
        last_line: int,
        reverts: int | None = None,
        call: str | None = None,
        head: _Head | None = None,
    ) -> PendingWrite:
        """Record a write of `key` before the file is replaced: reconcile the previous one (invariant 3),
        store the contents, give the next version number and append the index line.

        `before` is the file's content read under this lock (None: no file); `after` what it will hold.
        `head`: the head record as `read_head` gave it under this same lock (and `reconcile` left it), so
        that the lock file is read once per write; None reads it here. Raises OSError on a disk failure;
        nothing is recorded then.
        """
        if head is None:
            head = _Head.read(held)
        h = self._handles(key, head.generation)
        if head.counter > head.applied:
            self._reconcile(held, key, head, before_digest)
        index_size = _lseek(h.index_fd, 0, _SEEK_END)  # the sizes, without a stat
        pack_size = _lseek(h.pack_fd, 0, _SEEK_END)
        # The index ends with a whole line when it ends where this process's last line did and no begin
        # has run since (`_Handles.index_end`); otherwise its last byte is read (a torn line is possible).
        ends_whole = index_size == h.index_end and head.counter == h.end_version
        before_at, after_at = self._store(h, key, head, pack_size, before, before_digest, after, after_digest)
        version = (head.counter or self.last_version(key)) + 1
        head.write_counter(held, version)  # counter first: a crash after this skips a number, never reuses one
        fields = (
            version, clock.now(), session, operation, key, before_digest, after_digest, size_before, size_after,
            first_line, last_line, reverts, call,
        )  # fmt: skip
        try:
            line = _fields_line(fields, h.path_json, before_at, after_at)
            if index_size and not ends_whole and _pread(h.index_fd, 1, index_size - 1) != b"\n":
                line = b"\n" + line  # a torn last line (a crash mid-append) must not swallow this entry (inv. 4)
            n = _write(h.index_fd, line)  # one write; the rest of a short one as _write_all writes it
            if n != len(line):
                _write_all(h.index_fd, line[n:])
            if self.fsync:
                os.fdatasync(h.index_fd)
        except BaseException:
            self._truncate(h, index_size, pack_size)
            raise
        h.index_end, h.end_version = index_size + len(line), version
        if _FAULT:
            _fault("after-entry")
        return PendingWrite(fields, head, after_at, index_size, pack_size)

    def commit(self, held: LockFile, pending: PendingWrite) -> None:
        """The file now holds `pending`'s result: mark its version as applied (one pwrite, no fsync: if
        lost to a power cut, the next `begin` confirms the entry against the file's bytes)."""
        if _FAULT:
            _fault("before-commit")
        head = pending.head
        head.applied, head.digest, head.at = pending.version, pending.after, pending.after_at
        head.write(held)

    def abort(self, held: LockFile, pending: PendingWrite) -> None:
        """The replace failed: take back the entry and the contents appended for it. Under the lock."""
        h = self._handles(pending.entry.path, pending.head.generation)
        self._truncate(h, pending.index_size, pending.pack_size)
        head = pending.head
        head.counter = pending.version - 1
        with contextlib.suppress(OSError):
            head.write(held)

    # -- writes made by another program, announced before and after (agents' hooks) ------------------------
    def keep(self, held: LockFile, key: str, data: bytes, digest: str) -> None:
        """Before another program replaces `key`: keep its current bytes (read under this lock) as the
        pre-image of the write to come. Nothing is stored when they are the newest version's result (the
        usual case); otherwise they are appended to the path's pack and the head record names them, as it
        names a version's result, so that `record_kept` finds them from any process. Call `reconcile`
        first. Raises OSError on a disk failure."""
        head = _Head.read(held)
        h = self._handles(key, head.generation)
        if head.digest == digest and head.at is not None and head.at[1] == len(data):
            return
        pack_size = os.fstat(h.pack_fd).st_size
        at = (pack_size + _PACK_HEADER.size, len(data))
        _write_all(h.pack_fd, _PACK_HEADER.pack(_PACK_MAGIC, bytes.fromhex(digest), len(data)) + data)
        if self.fsync:
            os.fdatasync(h.pack_fd)
        self._remember(key, digest, h.pack_gen, at)
        head.digest, head.at, head.generation = digest, at, h.pack_gen
        head.write(held)

    def record_kept(
        self,
        held: LockFile,
        key: str,
        *,
        before_digest: str | None,
        after: bytes,
        after_digest: str,
        **fields: Any,
    ) -> HistoryEntry | None:
        """After another program replaced `key` (its new bytes `after`, read under this lock): the entry of
        that write, from the pre-image `keep` kept (`before_digest`; None: there was no file), applied at
        once. None, and nothing written, when the head no longer names that pre-image (another write was
        recorded since `keep`, or gc moved it away): the write cannot be recorded faithfully then."""
        head = _Head.read(held)
        before: bytes | None = None
        if before_digest is not None:
            if head.digest != before_digest or head.at is None:
                return None
            before = _pread_file(self._pack_file(file_stem(key), head.generation), head.at)
            if before is None or content_hash(before) != before_digest:
                return None
        pending = self.begin(
            held,
            key,
            before=before,
            before_digest=before_digest,
            after=after,
            after_digest=after_digest,
            size_before=len(before or b""),
            **fields,
        )
        self.commit(held, pending)
        return pending.entry

    def reconcile(self, held: LockFile, key: str, current_digest: str | None, head: _Head | None = None) -> bool:
        """Take back the newest entry of `key` if it was never applied (see invariant 3); True if one was.
        `current_digest` is the hash of the file's bytes read under the lock (None: no file). `head`: the
        head record from `read_head` under this lock, updated here as it is written (then given to
        `begin`); None reads it. Best effort: a disk error leaves the entry pending (the next write's
        `begin` reports it)."""
        try:
            if head is None:
                head = _Head.read(held)
            return head.counter > head.applied and self._reconcile(held, key, head, current_digest)
        except OSError:
            return False

    # The path's head record, read from its held lock file (for `reconcile` and `begin`, which then need
    # not read it again). Raises OSError. `_Head.read` itself: one call, no wrapper.
    read_head = staticmethod(_Head.read)

    def pending(self, held: LockFile) -> bool:
        """Whether the newest version given out for this lock's path is not yet known to have been applied
        (then `reconcile` needs the file's bytes)."""
        head = _Head.read(held)
        return head.counter > head.applied

    def _reconcile(self, held: LockFile, key: str, head: _Head, current: str | None) -> bool:
        if head.counter <= head.applied:
            return False
        last = self._last_line(key)
        taken_back = False
        if last is not None and last.entry.version == head.counter and last.entry.after != current:
            with open(self.index_path(key), "r+b") as f:
                f.truncate(last.start)
            taken_back = True
        elif last is not None and last.entry.version == head.counter:
            head.digest, head.at = last.entry.after, last.after_at
        head.applied = head.counter
        head.write(held)
        return taken_back

    def _store(
        self,
        h: _Handles,
        key: str,
        head: _Head,
        pack_size: int,
        before: bytes | None,
        before_digest: str | None,
        after: bytes | None,
        after_digest: str | None,
    ) -> tuple[Loc | None, Loc | None]:
        """Append what is not stored yet (one write, the headers and contents gathered without a copy); the
        locations of both contents. A content stored here is remembered for `load`; the pre-image the head
        names (the usual case) is stored already and costs nothing."""
        known = head.at
        if (
            known is not None
            and before is not None
            and after is not None
            and before_digest is not None
            and after_digest
            and head.digest == before_digest != after_digest
            and known[1] == len(before)
            and head.generation == h.pack_gen
        ):  # the usual write: the previous write's result is its pre-image, its own result is new
            n = len(after)
            after_at = (pack_size + _HEADER_SIZE, n)
            _writev_all(h.pack_fd, [_pack_header(_PACK_MAGIC, _fromhex(after_digest), n), after], n + _HEADER_SIZE)
            if self.fsync:
                os.fdatasync(h.pack_fd)
            locs = self._locs  # `_remember`, inline
            if len(locs) > 100_000:
                locs.clear()
            locs[key, after_digest] = (h.pack_gen, after_at)
            return known, after_at
        return self._store_general(h, key, head, pack_size, before, before_digest, after, after_digest)

    def _store_general(
        self,
        h: _Handles,
        key: str,
        head: _Head,
        pack_size: int,
        before: bytes | None,
        before_digest: str | None,
        after: bytes | None,
        after_digest: str | None,
    ) -> tuple[Loc | None, Loc | None]:
        """`_store` for every other case: a creation or a removal, a pre-image not stored yet (an outside
        change, or after gc), a write that leaves the content as it was."""
        before_at: Loc | None = None
        parts: list[bytes] = []
        stored: list[tuple[str, Loc]] = []
        pos = pack_size
        if before is not None and before_digest is not None:
            known = head.at
            if head.digest == before_digest and head.generation == h.pack_gen and known and known[1] == len(before):
                before_at = known  # the previous write's result: stored already
            else:
                before_at = (pos + _PACK_HEADER.size, len(before))
                pos = before_at[0] + len(before)
                parts += (_PACK_HEADER.pack(_PACK_MAGIC, bytes.fromhex(before_digest), len(before)), before)
                stored.append((before_digest, before_at))
        after_at: Loc | None = None
        if after is not None and after_digest is not None:
            if after_digest == before_digest:
                after_at = before_at
            else:
                after_at = (pos + _PACK_HEADER.size, len(after))
                pos = after_at[0] + len(after)
                parts += (_PACK_HEADER.pack(_PACK_MAGIC, bytes.fromhex(after_digest), len(after)), after)
                stored.append((after_digest, after_at))
        if parts:
            _writev_all(h.pack_fd, parts, pos - pack_size)
            if self.fsync:
                os.fdatasync(h.pack_fd)
            for digest, at in stored:
                if digest:
                    self._remember(key, digest, h.pack_gen, at)
        return before_at, after_at

    def _truncate(self, h: _Handles, index_size: int, pack_size: int) -> None:
        h.index_end = -1
        for fd, size in ((h.index_fd, index_size), (h.pack_fd, pack_size)):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)

    def _remember(self, key: str, digest: str, gen: int, at: Loc) -> None:
        if len(self._locs) > 100_000:
            self._locs.clear()
        self._locs[(key, digest)] = (gen, at)

    # -- descriptors --------------------------------------------------------------------------------------
    def _handles(self, key: str, token: int) -> _Handles:
        """The path's descriptors for pack generation `token` (kept open, at most `_MAX_OPEN` paths; one
        used by a write stays open until the write lets it go, see `_Handles`)."""
        with self._open_lock:
            h = self._open.get(key)
            if h is not None and h.token == token:  # the usual case: open already, still current
                self._open.move_to_end(key)
                return h
        h = self._open_handles(key, token)
        with self._open_lock:
            self._open.pop(key, None)
            self._open[key] = h
            while len(self._open) > _MAX_OPEN:
                self._open.popitem(last=False)
        return h

    def _open_handles(self, key: str, token: int) -> _Handles:
        name = file_stem(key)
        flags = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        index_fd = os.open(self._index_file(name), os.O_RDWR | flags, 0o600)  # read: the torn-tail check
        try:
            gen = _header_generation(index_fd)
            pack_fd = os.open(self._pack_file(name, gen), os.O_WRONLY | flags, 0o600)
        except BaseException:
            os.close(index_fd)
            raise
        return _Handles(key, index_fd, pack_fd, gen, token)

    # -- reading ------------------------------------------------------------------------------------------
    def entries(self, key: str) -> list[HistoryEntry]:
        """All versions of `key`, newest first."""
        out = self.read_index(file_stem(key)).entries
        out.reverse()
        return out

    def last_version(self, key: str) -> int:
        last = self._last_line(key)
        return last.entry.version if last is not None else 0

    def tail(self, key: str, max_bytes: int) -> TailRead:
        """The entries in the last `max_bytes` of `key`'s index, newest first (a reverse read)."""
        try:
            with open(self.index_path(key), "rb") as f:
                end = f.seek(0, os.SEEK_END)
                start = max(0, end - max_bytes)
                f.seek(start)
                data = f.read()
        except OSError:
            return TailRead([], True)
        lines = list(_parse_lines(data, start, skip_first=start > 0))
        return TailRead([ln.entry for ln in reversed(lines)], start == 0)

    def _last_line(self, key: str) -> _Line | None:
        """The newest parsable entry, reading back from the end a block at a time."""
        try:
            with open(self.index_path(key), "rb") as f:
                end = f.seek(0, os.SEEK_END)
                size = _TAIL_BLOCK
                while True:
                    start = max(0, end - size)
                    f.seek(start)
                    lines = list(_parse_lines(f.read(end - start), start, skip_first=start > 0))
                    if lines or start == 0:
                        return max(lines, key=lambda ln: ln.entry.version) if lines else None
                    size *= 4
        except OSError:
            return None

    def read_index(self, name: str) -> IndexFile:
        """One path's whole index, by the path hash (see `index_names`)."""
        try:
            with open(self._index_file(name), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        lines: list[_Line] = []
        unparsed: list[bytes] = []
        gen = _parse_into(data, lines, unparsed)
        lines.sort(key=lambda ln: ln.entry.version)
        key = lines[-1].entry.path if lines else None
        return IndexFile(name, key, lines, unparsed, gen)

    def index_names(self) -> list[str]:
        """The path hash of every index, sorted."""
        try:
            return sorted(n[: -len(".jsonl")] for n in os.listdir(self.index) if n.endswith(".jsonl"))
        except FileNotFoundError:
            return []

    def scan(self) -> Iterator[IndexFile]:
        """Every path's index."""
        for name in self.index_names():
            yield self.read_index(name)

    def key_of(self, name: str) -> str | None:
        """The path key whose index (and lock file) is named `name` (its hash), from its first entry."""
        try:
            with open(self._index_file(name), "rb") as f:
                head = f.read(64 * 1024)
        except OSError:
            return None
        for ln in _parse_lines(head, 0, skip_first=False):
            return ln.entry.path
        return None

    def recent(self, n: int) -> list[HistoryEntry]:
        """The `n` newest writes across paths, newest first (the indexes most recently appended)."""
        try:
            files = [(e.stat().st_mtime, e.name) for e in os.scandir(self.index) if e.name.endswith(".jsonl")]
        except FileNotFoundError:
            return []
        files.sort(reverse=True)
        found: list[HistoryEntry] = []
        for _, fname in files[: max(n, 0)]:
            key = self.key_of(fname[: -len(".jsonl")])
            if key is not None:
                found.extend(self.tail(key, 64 * 1024).entries[:n])
        found.sort(key=lambda e: e.time, reverse=True)
        return found[:n]

    def usage(self) -> dict[str, int]:
        """Stored contents, their bytes, and index files (for status displays)."""
        n = size = 0
        for ix in self.scan():
            sizes = ix.packed_sizes()
            n += len(sizes)
            size += sum(sizes.values())
        for _, _, s in self.iter_loose():
            n += 1
            size += s
        return {"objects": n, "bytes": size, "index_files": len(self.index_names())}

    # -- contents -----------------------------------------------------------------------------------------
    def has(self, digest: str, key: str | None = None) -> bool:
        """Whether the content `digest` (of path `key`, when known) can be loaded."""
        try:
            self.load(digest, key)
            return True
        except CoordinatorError:
            return False

    def load(self, digest: str, key: str | None = None) -> bytes:
        """The content `digest`, verified by its hash. Give the path `key` when known: without it, every
        path's index is searched."""
        damaged = False
        for k in [key] if key is not None else [ix.key for ix in self.scan() if digest in ix.references()]:
            if k is None:
                continue
            found = self._load_packed(k, digest)
            if isinstance(found, bytes):
                return found
            damaged = damaged or found
        try:
            data = self.object_path(digest).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            data = None
        if data is not None and content_hash(data) == digest:
            return data
        if damaged or data is not None:
            raise CoordinatorError(
                ErrorCode.IO_ERROR,
                f"The stored content {digest} is damaged (its hash does not match); choose another version.",
            )
        raise CoordinatorError(
            ErrorCode.FILE_NOT_FOUND,
            f"The stored content {digest} is no longer in the history (removed by retention?); choose another version.",
        )

    def _load_packed(self, key: str, digest: str) -> bytes | bool:
        """The bytes, or whether a stored copy was found damaged."""
        name = file_stem(key)
        cached = self._locs.get((key, digest))
        if cached is not None:
            data = _pread_file(self._pack_file(name, cached[0]), cached[1])
            if data is not None and content_hash(data) == digest:
                return data
        ix = self.read_index(name)
        damaged = False
        for ln in reversed(ix.lines):
            for d, at in ((ln.entry.after, ln.after_at), (ln.entry.before, ln.before_at)):
                if d != digest or at is None:
                    continue
                data = _pread_file(self._pack_file(name, ix.generation), at)
                if data is not None and content_hash(data) == digest:
                    self._remember(key, digest, ix.generation, at)
                    return data
                damaged = True
        return damaged

    def iter_loose(self) -> Iterator[tuple[str, Path, int]]:
        """(digest, path, size) of every content stored by an earlier version as a file of its own."""
        try:
            shards = list(os.scandir(self.objects))
        except FileNotFoundError:
            return
        for shard in shards:
            if not shard.is_dir(follow_symlinks=False):
                continue
            try:
                items = list(os.scandir(shard.path))
            except FileNotFoundError:
                continue
            for item in items:
                if item.name.startswith(".") or not item.is_file(follow_symlinks=False):
                    continue
                try:
                    size = item.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
                yield item.name, Path(item.path), size

    # -- gc -----------------------------------------------------------------------------------------------


def _fault(point: str) -> None:
    if point == _FAULT:
        os.kill(os.getpid(), signal.SIGKILL)
