"""History: every version of every path, kept by content, with a per-path index. The one owner of its format.

Nothing else reads or writes these files: the engine, `gc` (retention.py) and the commands ask this module
(typed `HistoryEntry` values, newest-first tail reads, whole-index scans, object loads, the rewrite for gc).

Layout under the state folder (per path, files named by the XXH3-128 hash of the path key):
    history/index/<path hash>.jsonl       one JSON line per write: version, time, session, operation, the
                                          content hashes before and after, and where each content is stored
                                          (`before_at` / `after_at`: [offset, length] in the path's pack).
                                          A first line {"format": 2, "pack": G} names the pack generation G
                                          (absent: 0); gc writes it when it compacts.
    history/packs/<path hash>.<G>.pack    the path's contents, appended: a 28-byte header (b"ECO1", the
                                          16-byte digest, the length) and the bytes.
    history/objects/<h[:2]>/<h>           contents stored by earlier versions (one file per content); still
                                          read, and moved into packs by `gc`.
    locks/<path hash>.lock                the path's lock file (locks.py) carries this module's 56-byte head
                                          record: the last version number given, the last version known to
                                          have reached the file, that version's content hash and location,
                                          and the pack generation.

Invariants, each enforced here:
1. Every write is undoable, and its pre-image is an object no other program holds: the engine hands over the
   bytes it read under the lock, and they are appended to the path's pack (a file only this module opens),
   never linked from the data file's inode. Loads verify the content hash.
2. A write costs appends to open files: the new content and the index line, each one `write` to a
   descriptor kept open per path. The pre-image usually costs nothing: it is the previous write's result,
   whose location the head record holds. A content is stored again only after an outside change.
3. Entry first: the index line (and the contents) are written before the data file is replaced, so a
   crash right after the replace leaves the write undoable. `commit` then marks the version as applied in
   the head record (a pwrite to the lock file, no fsync). The next write of the path (`begin`) and `gc`
   reconcile an unmarked newest entry against the bytes actually on disk: if the file does not hold that
   entry's result, the replace never happened (a crash in between) and the entry is taken back, so the
   history lists only versions that reached the file. Version numbers skip it (never reused).
4. All writes of a path's index, pack and head happen under the path's lock; a torn tail (crash mid-append)
   is never read as an entry and never swallows the next one.
5. gc replaces a pack and its index only under the path's lock: the new pack under a new generation, then
   the index naming it (an atomic replace), then the old pack is removed. The head's generation is bumped
   first, so a writer in another process reopens its cached descriptors before its next append.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import xxhash

from .errors import CoordinatorError, ErrorCode
from .layout import history_dir

FORMAT = 2
_PACK_MAGIC = b"ECO1"
_PACK_HEADER = struct.Struct("<4s16sQ")  # magic, digest, length
_HEAD = struct.Struct("<QQ16sQQQ")  # counter, applied, digest, offset, length, generation
_NO_DIGEST = bytes(16)
_HEX32 = re.compile(rb"[0-9a-f]{32}")
_MAX_OPEN = 128  # paths whose append descriptors stay open in one process
_TAIL_BLOCK = 16 * 1024

Loc = tuple[int, int]  # (offset of the bytes in the pack, length)


def content_hash(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def path_hash(key: str) -> str:
    """The file name stem for a path key (index, pack, and lock file alike)."""
    return xxhash.xxh3_128_hexdigest(key.encode("utf-8", "surrogateescape"))


@dataclass(frozen=True)
class HistoryEntry:
    """One write of one path. `before` is None when the write created the file; `after` None when it
    removed it (an undo of a creation)."""

    version: int
    time: float
    session: str
    operation: str
    path: str
    before: str | None
    after: str | None
    size_before: int
    size_after: int
    first_line: int
    last_line: int

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))  # flat fields only: cheaper than dataclasses.asdict on the write path


_ENTRY_FIELDS = frozenset(f.name for f in fields(HistoryEntry))


@dataclass(frozen=True)
class _Line:
    """One parsed index line: the entry, where its contents are stored, and where the line starts."""

    entry: HistoryEntry
    before_at: Loc | None
    after_at: Loc | None
    start: int
    end: int


@dataclass
class IndexFile:
    """One path's index as read: entries oldest first, lines that could not be parsed, the pack generation."""

    name: str  # the path hash
    key: str | None
    lines: list[_Line]
    unparsed: list[bytes] = field(default_factory=list)
    generation: int = 0

    @property
    def entries(self) -> list[HistoryEntry]:
        return [ln.entry for ln in self.lines]

    def references(self) -> set[str]:
        """Content hashes this index refers to (hashes seen in unparsed lines count too)."""
        refs = {d for ln in self.lines for d in (ln.entry.before, ln.entry.after) if d}
        for line in self.unparsed:
            refs.update(m.decode() for m in _HEX32.findall(line))
        return refs

    def loose_references(self) -> set[str]:
        """Hashes that may be stored as loose (earlier-format) objects: not packed, or in unparsed lines."""
        refs: set[str] = set()
        for ln in self.lines:
            if ln.entry.before and ln.before_at is None:
                refs.add(ln.entry.before)
            if ln.entry.after and ln.after_at is None:
                refs.add(ln.entry.after)
        for line in self.unparsed:
            refs.update(m.decode() for m in _HEX32.findall(line))
        return refs

    def packed_sizes(self) -> dict[str, int]:
        """Content hash -> stored length, for the contents in this path's pack."""
        out: dict[str, int] = {}
        for ln in self.lines:
            for d, at in ((ln.entry.before, ln.before_at), (ln.entry.after, ln.after_at)):
                if d and at is not None:
                    out[d] = at[1]
        return out


@dataclass(frozen=True)
class TailRead:
    """The newest entries of one path, newest first; `whole` when the index was read to its start."""

    entries: list[HistoryEntry]
    whole: bool


class LockFile(Protocol):
    """What the history needs of a held path lock (locks.HeldLock): its lock file, to keep the head in."""

    fd: int


@dataclass
class _Head:
    counter: int = 0  # the last version number given out
    applied: int = 0  # the last version known to have reached the file
    digest: str | None = None  # the content that version left (None: unknown, or no file)
    at: Loc | None = None  # where that content is stored, in pack generation `generation`
    generation: int = 0

    @classmethod
    def read(cls, held: LockFile) -> _Head:
        raw = os.pread(held.fd, _HEAD.size, 0)
        if len(raw) < _HEAD.size:  # an earlier lock file: the bare counter, nothing pending
            counter = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else 0
            return cls(counter, counter)
        counter, applied, digest, off, length, gen = _HEAD.unpack(raw)
        has = digest != _NO_DIGEST
        return cls(counter, applied, digest.hex() if has else None, (off, length) if has else None, gen)

    def write(self, held: LockFile) -> None:
        digest = bytes.fromhex(self.digest) if self.digest and self.at else _NO_DIGEST
        off, length = self.at if self.digest and self.at else (0, 0)
        os.pwrite(held.fd, _HEAD.pack(self.counter, self.applied, digest, off, length, self.generation), 0)


@dataclass
class PendingWrite:
    """A write recorded by `begin` whose replace has not been confirmed yet (see `commit` / `abort`)."""

    entry: HistoryEntry
    head: _Head
    after_at: Loc | None
    index_size: int
    pack_size: int


class _Handles:
    """One path's append descriptors, valid while the head's generation is `token`."""

    def __init__(self, key: str, index_fd: int, pack_fd: int, pack_gen: int, token: int) -> None:
        self.key = key
        self.index_fd = index_fd
        self.pack_fd = pack_fd
        self.pack_gen = pack_gen
        self.token = token
        self.users = 0

    def close(self) -> None:
        for fd in (self.index_fd, self.pack_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class History:
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
        return f"{self._index_str}/{path_hash(key)}.jsonl"

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
        **fields: Any,
    ) -> PendingWrite:
        """Record a write of `key` before the file is replaced: reconcile the previous one (invariant 3),
        store the contents, give the next version number and append the index line.

        `before` is the file's content read under this lock (None: no file); `after` what it will hold.
        Raises OSError on a disk failure; nothing is recorded then.
        """
        head = _Head.read(held)
        h = self._acquire_handles(key, head.generation)
        try:
            self._reconcile(held, key, head, before_digest)
            index_size = os.fstat(h.index_fd).st_size
            pack_size = os.fstat(h.pack_fd).st_size
            before_at, after_at = self._store(h, key, head, pack_size, before, before_digest, after, after_digest)
            version = (head.counter or self.last_version(key)) + 1
            head.counter = version
            head.write(held)  # counter first: a crash after this skips a number, never reuses one
            entry = HistoryEntry(
                version=version, time=time.time(), path=key, before=before_digest, after=after_digest, **fields
            )
            try:
                self._append_line(h, index_size, entry, before_at, after_at)
            except BaseException:
                self._truncate(h, index_size, pack_size)
                raise
            return PendingWrite(entry, head, after_at, index_size, pack_size)
        finally:
            self._release_handles(h)

    def commit(self, held: LockFile, pending: PendingWrite) -> None:
        """The file now holds `pending`'s result: mark its version as applied (one pwrite, no fsync: if
        lost to a power cut, the next `begin` confirms the entry against the file's bytes)."""
        head = pending.head
        head.applied = pending.entry.version
        head.digest = pending.entry.after
        head.at = pending.after_at
        head.write(held)

    def abort(self, held: LockFile, pending: PendingWrite) -> None:
        """The replace failed: take back the entry and the contents appended for it. Under the lock."""
        h = self._acquire_handles(pending.entry.path, pending.head.generation)
        try:
            self._truncate(h, pending.index_size, pending.pack_size)
        finally:
            self._release_handles(h)
        head = pending.head
        head.counter = pending.entry.version - 1
        with contextlib.suppress(OSError):
            head.write(held)

    def reconcile(self, held: LockFile, key: str, current_digest: str | None) -> bool:
        """Take back the newest entry of `key` if it was never applied (see invariant 3); True if one was.
        `current_digest` is the hash of the file's bytes read under the lock (None: no file). Best effort:
        a disk error leaves the entry pending (the next write's `begin` reports it)."""
        try:
            head = _Head.read(held)
            return self._reconcile(held, key, head, current_digest)
        except OSError:
            return False

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
        """Append what is not stored yet (one write); the locations of both contents."""
        chunks: list[bytes] = []
        pos = pack_size

        def put(data: bytes, digest: str) -> Loc:
            nonlocal pos
            chunks.append(_PACK_HEADER.pack(_PACK_MAGIC, bytes.fromhex(digest), len(data)))
            chunks.append(data)
            at = (pos + _PACK_HEADER.size, len(data))
            pos = at[0] + len(data)
            return at

        before_at: Loc | None = None
        if before is not None and before_digest is not None:
            known = head.at if head.digest == before_digest and head.generation == h.pack_gen else None
            if known is not None and known[1] == len(before):
                before_at = known  # the previous write's result: stored already
            else:
                before_at = put(before, before_digest)
        after_at: Loc | None = None
        if after is not None and after_digest is not None:
            after_at = before_at if after_digest == before_digest else put(after, after_digest)
        if chunks:
            _write_all(h.pack_fd, b"".join(chunks))
            if self.fsync:
                os.fdatasync(h.pack_fd)
        for d, at in ((before_digest, before_at), (after_digest, after_at)):
            if d and at:
                self._remember(key, d, h.pack_gen, at)
        return before_at, after_at

    def _append_line(self, h: _Handles, size: int, entry: HistoryEntry, b_at: Loc | None, a_at: Loc | None) -> None:
        record = entry.to_dict()
        if b_at is not None:
            record["before_at"] = list(b_at)
        if a_at is not None:
            record["after_at"] = list(a_at)
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        if size and os.pread(h.index_fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # a torn last line (crash mid-append) must not swallow this entry
        _write_all(h.index_fd, line)
        if self.fsync:
            os.fdatasync(h.index_fd)

    def _truncate(self, h: _Handles, index_size: int, pack_size: int) -> None:
        for fd, size in ((h.index_fd, index_size), (h.pack_fd, pack_size)):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)

    def _remember(self, key: str, digest: str, gen: int, at: Loc) -> None:
        if len(self._locs) > 100_000:
            self._locs.clear()
        self._locs[(key, digest)] = (gen, at)

    # -- descriptors --------------------------------------------------------------------------------------
    def _acquire_handles(self, key: str, token: int) -> _Handles:
        with self._open_lock:
            h = self._open.get(key)
            if h is not None and h.token != token:
                del self._open[key]
                if h.users == 0:
                    h.close()
                h = None
            if h is not None:
                self._open.move_to_end(key)
                h.users += 1
                return h
        h = self._open_handles(key, token)
        with self._open_lock:
            old = self._open.pop(key, None)
            if old is not None and old.users == 0:
                old.close()
            self._open[key] = h
            h.users += 1
            self._evict()
        return h

    def _evict(self) -> None:
        for k in list(self._open):
            if len(self._open) <= _MAX_OPEN:
                return
            if self._open[k].users == 0:
                self._open.pop(k).close()

    def _release_handles(self, h: _Handles) -> None:
        with self._open_lock:
            h.users -= 1
            if h.users == 0 and self._open.get(h.key) is not h:
                h.close()

    def _open_handles(self, key: str, token: int) -> _Handles:
        name = path_hash(key)
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
        out = self.read_index(path_hash(key)).entries
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
        name = path_hash(key)
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
    def rewrite(
        self, held: LockFile, key: str, drop: set[int], current: Callable[[], str | bool | None]
    ) -> tuple[bool, int]:
        """Under `key`'s lock: reconcile, drop the `drop` versions (never the newest), and compact the pack
        to the contents the kept entries refer to (moving earlier loose objects in). `current()` gives the
        hash of the file's bytes (None: no file; False: unreadable, then nothing is taken back). Returns
        (whether the index changed, versions taken back as never applied). Invariant 5."""
        head = _Head.read(held)
        taken_back = 0
        if head.counter > head.applied:
            digest = current()
            if digest is not False:
                taken_back = int(self._reconcile(held, key, head, digest if isinstance(digest, str) else None))
        name = path_hash(key)
        ix = self.read_index(name)
        if not ix.lines:
            return False, taken_back
        newest = ix.lines[-1].entry.version
        kept = [ln for ln in ix.lines if ln.entry.version == newest or ln.entry.version not in drop]
        if len(kept) == len(ix.lines) and not any(self._loose_only(ln) for ln in kept):
            return False, taken_back
        head = _Head.read(held)
        gen = max(head.generation, ix.generation) + 1
        body, relocated, placed = self._compact(key, ix, kept)
        pack_tmp = self._pack_file(name, gen) + f".{secrets.token_hex(4)}.tmp"
        _write_file(pack_tmp, b"".join(body))
        os.replace(pack_tmp, self._pack_file(name, gen))
        head.generation = gen  # before the index names it: writers elsewhere reopen (invariant 5)
        head.at = placed.get(head.digest or "")
        head.write(held)
        lines = [json.dumps({"format": FORMAT, "pack": gen}, separators=(",", ":")).encode()]
        lines += [_line_bytes(ln.entry, *relocated[ln.entry.version]) for ln in kept]
        lines += ix.unparsed
        index_tmp = self._index_file(name) + f".{secrets.token_hex(4)}.tmp"
        _write_file(index_tmp, b"\n".join(lines) + b"\n")
        os.replace(index_tmp, self._index_file(name))
        if ix.generation != gen:
            with contextlib.suppress(OSError):
                os.unlink(self._pack_file(name, ix.generation))
        self._locs = {k: v for k, v in self._locs.items() if k[0] != key}
        return True, taken_back

    def _loose_only(self, ln: _Line) -> bool:
        """An entry whose content is stored only as an earlier version's loose object (to move in)."""
        pairs = ((ln.entry.before, ln.before_at), (ln.entry.after, ln.after_at))
        return any(d is not None and at is None and self.object_path(d).is_file() for d, at in pairs)

    def _compact(
        self, key: str, ix: IndexFile, kept: list[_Line]
    ) -> tuple[list[bytes], dict[int, tuple[Loc | None, Loc | None]], dict[str, Loc]]:
        body: list[bytes] = []
        placed: dict[str, Loc] = {}
        pos = 0
        relocated: dict[int, tuple[Loc | None, Loc | None]] = {}
        for ln in kept:
            locs: list[Loc | None] = []
            for d, at in ((ln.entry.before, ln.before_at), (ln.entry.after, ln.after_at)):
                if d is None:
                    locs.append(None)
                    continue
                if d not in placed:
                    data = self._read_for_compaction(key, ix.generation, d, at)
                    if data is None:
                        locs.append(None)  # gone already: the entry stays, its content cannot be loaded
                        continue
                    body.append(_PACK_HEADER.pack(_PACK_MAGIC, bytes.fromhex(d), len(data)))
                    body.append(data)
                    placed[d] = (pos + _PACK_HEADER.size, len(data))
                    pos += _PACK_HEADER.size + len(data)
                locs.append(placed[d])
            relocated[ln.entry.version] = (locs[0], locs[1])
        return body, relocated, placed

    def _read_for_compaction(self, key: str, gen: int, digest: str, at: Loc | None) -> bytes | None:
        if at is not None:
            data = _pread_file(self._pack_file(path_hash(key), gen), at)
            if data is not None and content_hash(data) == digest:
                return data
        try:
            data = self.object_path(digest).read_bytes()
        except OSError:
            return None
        return data if content_hash(data) == digest else None

    def orphan_packs(self) -> list[Path]:
        """Packs of an earlier generation than their index names (left by a gc that died between its
        steps, or kept open by a reader). A pack whose index does not exist is left alone (a writer may be
        creating both right now)."""
        gens = {ix.name: ix.generation for ix in self.scan()}
        out: list[Path] = []
        try:
            names = os.listdir(self.packs)
        except FileNotFoundError:
            return []
        for n in names:
            stem, _, rest = n.partition(".")
            gen = rest[: -len(".pack")] if rest.endswith(".pack") else ""
            if stem in gens and gen.isdigit() and int(gen) != gens[stem]:
                out.append(self.packs / n)
        return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, "No space left on device")
        view = view[n:]


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _pread_file(path: str, at: Loc) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.pread(fd, at[1], at[0])
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == at[1] else None


def _header_generation(fd: int) -> int:
    first = os.pread(fd, 256, 0).split(b"\n", 1)[0]
    if not first.startswith(b'{"format"'):
        return 0
    try:
        return int(json.loads(first).get("pack", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _line_bytes(entry: HistoryEntry, b_at: Loc | None, a_at: Loc | None) -> bytes:
    record = entry.to_dict()
    if b_at is not None:
        record["before_at"] = list(b_at)
    if a_at is not None:
        record["after_at"] = list(a_at)
    return json.dumps(record, separators=(",", ":")).encode()


def _loc(value: Any) -> Loc | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(x, int) and x >= 0 for x in value):
        return (value[0], value[1])
    return None


def _parse(raw: bytes) -> tuple[HistoryEntry, Loc | None, Loc | None] | None:
    try:
        d = json.loads(raw)
        entry = HistoryEntry(**{k: v for k, v in d.items() if k in _ENTRY_FIELDS})
    except (ValueError, TypeError, AttributeError):
        return None
    if not isinstance(entry.version, int):
        return None
    return entry, _loc(d.get("before_at")), _loc(d.get("after_at"))


def _split(data: bytes, base: int, skip_first: bool) -> Iterable[tuple[bytes, int, int]]:
    pos = 0
    if skip_first:
        cut = data.find(b"\n")
        if cut < 0:
            return
        pos = cut + 1
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        yield data[pos:end].rstrip(b"\n"), base + pos, base + end
        pos = end


def _parse_lines(data: bytes, base: int, skip_first: bool) -> Iterator[_Line]:
    for raw, start, end in _split(data, base, skip_first):
        parsed = _parse(raw) if raw.strip() and not raw.startswith(b'{"format"') else None
        if parsed is not None:
            yield _Line(parsed[0], parsed[1], parsed[2], start, end)


def _parse_into(data: bytes, lines: list[_Line], unparsed: list[bytes]) -> int:
    """Every line of a whole index; returns the pack generation its header names (0 without one)."""
    gen = 0
    for raw, start, end in _split(data, 0, skip_first=False):
        if not raw.strip():
            continue
        if raw.startswith(b'{"format"'):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                gen = int(json.loads(raw).get("pack", 0))
            continue
        parsed = _parse(raw)
        if parsed is None:
            unparsed.append(raw)
        else:
            lines.append(_Line(parsed[0], parsed[1], parsed[2], start, end))
    return gen
