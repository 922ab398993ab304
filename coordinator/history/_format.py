"""The history's on-disk format: entries, index lines, the head record, pack records (see __init__)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import xxhash

from coordinator.clock import time_text
from coordinator.frozen import fast_init, made_from

FORMAT = 2
_PACK_MAGIC = b"ECO1"
_PACK_HEADER = struct.Struct("<4s16sQ")  # magic, digest, length
_HEAD = struct.Struct("<QQ16sQQQ")  # counter, applied, digest, offset, length, generation
_COUNTER = struct.Struct("<Q")  # the head's first field alone
_HEAD_SIZE, _pack_head, _unpack_head, _pack_counter = _HEAD.size, _HEAD.pack, _HEAD.unpack, _COUNTER.pack
_pread, _pwrite, _fromhex = os.pread, os.pwrite, bytes.fromhex
_NO_DIGEST = bytes(16)
_HEX32 = re.compile(rb"[0-9a-f]{32}")
_MAX_OPEN = 128  # paths whose append descriptors stay open in one process
_TAIL_BLOCK = 16 * 1024
# Crash tests only: the process kills itself (SIGKILL) at the named point of a write, to show what the next
# process finds ("after-entry": the index line is written, the file not replaced yet; "before-commit": the
# file is replaced, the version not yet marked as applied). Read once, at import.
_FAULT = os.environ.get("EDIT_COORDINATOR_FAULT", "")

Loc = tuple[int, int]  # (offset of the bytes in the pack, length)


#: A content's hash, as history, views and events name it: XXH3-128 in hex (the C function itself, not a
#: wrapper: it is called twice per write).
content_hash: Callable[[bytes], str] = xxhash.xxh3_128_hexdigest


@fast_init
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
    reverts: int | None = None  # an undo or redo: the version whose change it reverted (undoing.py)
    call: str | None = None  # the agent's tool-call id: a write its own tool made, recorded through its hooks

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))  # flat fields only: cheaper than dataclasses.asdict on the write path


_ENTRY_FIELDS = frozenset(f.name for f in fields(HistoryEntry))


def entry_of(
    version: int, time: float, session: str, operation: str, path: str, before: str | None, after: str | None,
    size_before: int, size_after: int, first_line: int, last_line: int, reverts: int | None, call: str | None,
) -> HistoryEntry:  # fmt: skip
    """`HistoryEntry(...)` with every field given in field order, for `History.begin` (one per write):
    its instance dict made at once, without the keyword binding and the generated `__init__`'s update.
    The same instance `HistoryEntry` makes (equal, frozen; tests/coordinator/history pins it)."""
    return made_from(HistoryEntry, {
        "version": version, "time": time, "session": session, "operation": operation, "path": path,
        "before": before, "after": after, "size_before": size_before, "size_after": size_after,
        "first_line": first_line, "last_line": last_line, "reverts": reverts, "call": call,
    })  # fmt: skip


_escape: Callable[[str], str] = json.encoder.encode_basestring_ascii

#: A history entry's fields in HistoryEntry's field order (`entry_of`'s arguments): version, time, session,
#: operation, path, before, after, size_before, size_after, first_line, last_line, reverts, call.
_EntryFields = tuple[int, float, str, str, str, str | None, str | None, int, int, int, int, int | None, str | None]


@fast_init
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


@dataclass(slots=True)
class _Head:
    """The path's head record, kept in its lock file (see the package docstring, `locks/`).

    Invariant: `whole` is True only while the lock file holds exactly the 56 bytes `write` would pack from
    these fields (as read, or as last written); then a change of the counter alone can be written as its
    own 8 bytes (`write_counter`) and the file ends up byte for byte as a whole `write` would leave it.
    Every change of another field is followed by `write`, which sets `whole` by its pwrite's outcome (False
    when it fails or writes short)."""

    counter: int = 0  # the last version number given out
    applied: int = 0  # the last version known to have reached the file
    digest: str | None = None  # the content that version left (None: unknown, or no file)
    at: Loc | None = None  # where that content is stored, in pack generation `generation`
    generation: int = 0
    whole: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def read(cls, held: LockFile) -> _Head:
        raw = _pread(held.fd, _HEAD_SIZE, 0)
        if len(raw) != _HEAD_SIZE:  # an earlier lock file: the bare counter, nothing pending
            counter = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else 0
            return cls(counter, counter)
        counter, applied, digest, off, length, gen = _unpack_head(raw)
        if digest != _NO_DIGEST:
            return cls(counter, applied, digest.hex(), (off, length), gen, True)
        return cls(counter, applied, None, None, gen, off == 0 and length == 0)

    def write(self, held: LockFile) -> None:
        digest, at = self.digest, self.at
        try:
            if digest and at:
                raw = _pack_head(self.counter, self.applied, _fromhex(digest), at[0], at[1], self.generation)
            else:
                raw = _pack_head(self.counter, self.applied, _NO_DIGEST, 0, 0, self.generation)
            self.whole = _pwrite(held.fd, raw, 0) == _HEAD_SIZE
        except BaseException:  # the record on disk is unknown now
            self.whole = False
            raise

    def write_counter(self, held: LockFile, counter: int) -> None:
        """Give out `counter`: its 8 bytes alone when the record on disk is whole, else the whole record."""
        self.counter = counter
        if not self.whole:
            return self.write(held)
        try:
            self.whole = _pwrite(held.fd, _pack_counter(counter), 0) == 8
        except BaseException:
            self.whole = False
            raise


HeadRecord = _Head  # the public name, for a caller that reads the head once (`History.read_head`)


class PendingWrite:
    """A write recorded by `begin` whose replace has not been confirmed yet (see `commit` / `abort`).

    It keeps its entry's fields (`fields`, in HistoryEntry's field order) and makes the HistoryEntry only
    when asked (`entry`): the write path reads the version, the time and the new content's hash, which are
    kept apart, and a frozen entry made per write would cost about 7,700 instructions of the edit's 400,000
    (an instance dict of 13 fields, made and freed)."""

    __slots__ = ("_entry", "after", "after_at", "fields", "head", "index_size", "pack_size", "time", "version")

    def __init__(
        self, fields: _EntryFields, head: _Head, after_at: Loc | None, index_size: int, pack_size: int
    ) -> None:
        self.fields = fields
        self.version, self.time, self.after = fields[0], fields[1], fields[6]
        self.head = head
        self.after_at = after_at
        self.index_size = index_size
        self.pack_size = pack_size
        self._entry: HistoryEntry | None = None

    @property
    def entry(self) -> HistoryEntry:
        """The write's history entry, as the index line says it (made once, on the first ask)."""
        if self._entry is None:
            self._entry = entry_of(*self.fields)
        return self._entry


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, "No space left on device")
        view = view[n:]


def _writev_all(fd: int, parts: list[bytes], total: int) -> None:
    """`parts` (`total` bytes in all) appended with one writev, without joining them; the rest of a short
    write as `_write_all` writes it."""
    n = os.writev(fd, parts)
    if n != total:
        _write_all(fd, b"".join(parts)[n:])


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


def _json_str(value: str | None) -> str:
    return "null" if value is None else _escape(value)


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def _line_bytes(entry: HistoryEntry, b_at: Loc | None, a_at: Loc | None) -> bytes:
    """The index line of `entry`: the JSON object `json.dumps(record, separators=(",", ":"))` would write
    (the same keys in the same order, ASCII only), written field by field with the standard library's
    string escaper: about a fifth of json.dumps's cost on the write path. tests/history pins the two
    against each other."""
    e = entry
    parts = [
        f'{{"version":{int(e.version)},"time":{time_text(float(e.time))},"session":{_escape(e.session)}',
        f',"operation":{_escape(e.operation)},"path":{_escape(e.path)}',
        f',"before":{_json_str(e.before)},"after":{_json_str(e.after)}',
        f',"size_before":{int(e.size_before)},"size_after":{int(e.size_after)}',
        f',"first_line":{int(e.first_line)},"last_line":{int(e.last_line)},"reverts":{_json_int(e.reverts)}',
        f',"call":{_json_str(e.call)}',
    ]
    if b_at is not None:
        parts.append(f',"before_at":[{int(b_at[0])},{int(b_at[1])}]')
    if a_at is not None:
        parts.append(f',"after_at":[{int(a_at[0])},{int(a_at[1])}]')
    parts.append("}")
    return "".join(parts).encode()


_BEFORE_AT, _AFTER_AT = ',"before_at":[%d,%d]', ',"after_at":[%d,%d]'


def _fields_line(f: _EntryFields, path_json: str, b_at: Loc | None, a_at: Loc | None) -> bytes:
    """`_line_bytes(entry, b_at, a_at) + b"\n"` of the entry whose fields are `f` (`PendingWrite.fields`,
    HistoryEntry's field order), made directly for the write path, without making the entry: `path_json`
    is `_escape(entry.path)`, kept per path. The same bytes for every entry `begin` makes (its integer
    fields are ints, its time a float); tests/history pins the two against each other. One f-string (about
    15 % fewer instructions than the same line as one `%` format, which parses its format text each call)."""
    version, when, session, operation, _, b, a, size_before, size_after, first_line, last_line, r, c = f
    before = "null" if b is None else _escape(b)
    after = "null" if a is None else _escape(a)
    reverts = "null" if r is None else int(r)
    call = "null" if c is None else _escape(c)
    b_loc = "" if b_at is None else _BEFORE_AT % b_at
    a_loc = "" if a_at is None else _AFTER_AT % a_at
    return (
        f'{{"version":{version},"time":{time_text(float(when))},"session":{_escape(session)},'
        f'"operation":{_escape(operation)},"path":{path_json},"before":{before},"after":{after},'
        f'"size_before":{size_before},"size_after":{size_after},"first_line":{first_line},'
        f'"last_line":{last_line},"reverts":{reverts},"call":{call}{b_loc}{a_loc}}}\n'
    ).encode()


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


def count_entry_lines(data: bytes) -> int:
    """The entry lines among complete lines of an index (bytes ending at a line end), without parsing them:
    every line but blank ones and the format header. For size figures: a damaged line counts as one."""
    lines = data.count(b"\n") - data.count(b"\n\n") - (1 if data.startswith(b"\n") else 0)
    return lines - (1 if data.startswith(b'{"format"') else 0)


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
