"""The history format: entries, contents, reconciliation and the gc rewrite, through History alone."""

from __future__ import annotations

import json
import os
from dataclasses import astuple, replace
from pathlib import Path

import pytest

from coordinator.disk.locks import LockManager
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.hashing import file_stem
from coordinator.history import History, content_hash

FIELDS = {"session": "s", "operation": "write", "size_before": 0, "size_after": 0, "first_line": 1, "last_line": 1}


def _write(h: History, locks: LockManager, key: str, before: bytes | None, after: bytes | None, commit: bool = True):
    with locks.acquire(key) as held:
        pending = h.begin(
            held,
            key,
            before=before,
            before_digest=None if before is None else content_hash(before),
            after=after,
            after_digest=None if after is None else content_hash(after),
            **FIELDS,
        )
        if commit:
            h.commit(held, pending)
        return pending


def _pack_size(h: History, key: str) -> int:
    return sum(p.stat().st_size for p in h.packs.glob(file_stem(key) + ".*.pack"))


@pytest.fixture
def store(tmp_path: Path) -> tuple[History, LockManager]:
    return History(tmp_path, fsync=False), LockManager(tmp_path / "locks")


def test_versions_and_contents_round_trip(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    _write(h, locks, "a.txt", b"one\n", b"two\n")
    _write(h, locks, "a.txt", b"two\n", b"three\n")
    entries = h.entries("a.txt")
    assert [e.version for e in entries] == [3, 2, 1]
    assert entries[-1].before is None and entries[0].after == content_hash(b"three\n")
    for data in (b"one\n", b"two\n", b"three\n"):
        assert h.load(content_hash(data), "a.txt") == data
        assert History(h.base.parent).load(content_hash(data), "a.txt") == data  # another process
    assert h.last_version("a.txt") == 3
    assert [e.version for e in h.tail("a.txt", 10_000).entries] == [3, 2, 1]


def test_previous_result_is_not_stored_again(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"x" * 1000)
    size = _pack_size(h, "a.txt")
    _write(h, locks, "a.txt", b"x" * 1000, b"y" * 1000)
    assert _pack_size(h, "a.txt") - size < 1100  # only the new content: the pre-image was stored already
    size = _pack_size(h, "a.txt")
    _write(h, locks, "a.txt", b"z" * 1000, b"w" * 1000)  # an outside change: its content is stored too
    assert _pack_size(h, "a.txt") - size > 2000
    assert h.load(content_hash(b"z" * 1000), "a.txt") == b"z" * 1000


def test_abort_takes_back_the_entry_and_its_contents(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    index_before = Path(h.index_path("a.txt")).read_bytes()
    pack_before = _pack_size(h, "a.txt")
    with locks.acquire("a.txt") as held:
        p = h.begin(held, "a.txt", before=b"one\n", before_digest=content_hash(b"one\n"), after=b"2\n",
                    after_digest=content_hash(b"2\n"), **FIELDS)  # fmt: skip
        h.abort(held, p)
    assert Path(h.index_path("a.txt")).read_bytes() == index_before
    assert _pack_size(h, "a.txt") == pack_before
    assert _write(h, locks, "a.txt", b"one\n", b"3\n").entry.version == 2  # the number is given again


def test_an_entry_whose_replace_never_happened_is_taken_back(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    _write(h, locks, "a.txt", b"one\n", b"two\n", commit=False)  # as if killed before the rename
    assert [e.version for e in h.entries("a.txt")] == [2, 1]
    # The next write finds the file still holding version 1's result: version 2 never happened.
    p = _write(h, locks, "a.txt", b"one\n", b"three\n")
    assert [e.version for e in h.entries("a.txt")] == [3, 1]
    assert p.entry.before == content_hash(b"one\n")


def test_an_entry_whose_replace_happened_is_kept(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    _write(h, locks, "a.txt", b"one\n", b"two\n", commit=False)  # killed after the rename, before the mark
    with locks.acquire("a.txt") as held:
        assert h.reconcile(held, "a.txt", content_hash(b"two\n")) is False
    assert [e.version for e in h.entries("a.txt")] == [2, 1]
    size = _pack_size(h, "a.txt")
    _write(h, locks, "a.txt", b"two\n", b"three\n")
    assert _pack_size(h, "a.txt") - size < 100  # the confirmed result counts as stored


def test_a_torn_last_line_neither_reads_as_an_entry_nor_swallows_the_next(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    with open(h.index_path("a.txt"), "ab") as f:
        f.write(b'{"version":2,"ti')
    assert [e.version for e in h.entries("a.txt")] == [1]
    _write(h, locks, "a.txt", b"one\n", b"two\n")
    assert [e.version for e in h.entries("a.txt")] == [2, 1]


def test_a_torn_line_of_the_very_size_this_process_left_is_still_found(store: tuple[History, LockManager]) -> None:
    """`begin` skips reading the index's last byte only while no begin ran since this process's last line:
    a writer that raised the counter and died mid-append, leaving the index at that very size, is caught."""
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    _write(h, locks, "a.txt", b"one\n", b"two\n")
    index = Path(h.index_path("a.txt"))
    raw = index.read_bytes()
    last_start = raw.rindex(b"\n", 0, len(raw) - 1) + 1
    with locks.acquire("a.txt") as held:  # another writer's begin: the counter first, then a torn line
        h.read_head(held).write_counter(held, 3)
    torn = b'{"version":3,"time":1.0,"x":"' + b"y" * (len(raw) - last_start - 30) + b'"'
    with open(index, "r+b") as f:
        f.truncate(last_start)
        f.seek(0, os.SEEK_END)
        f.write(torn)
    assert index.stat().st_size == len(raw)  # the size this process's last line left
    _write(h, locks, "a.txt", b"two\n", b"three\n")
    assert [e.version for e in h.entries("a.txt")][:1] == [4]


def test_damaged_and_missing_contents_are_clear_errors(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    pack = next(h.packs.glob("*.pack"))
    data = bytearray(pack.read_bytes())
    data[-2] ^= 0xFF
    pack.write_bytes(bytes(data))
    with pytest.raises(CoordinatorError) as info:
        History(h.base.parent).load(content_hash(b"one\n"), "a.txt")
    assert info.value.code is ErrorCode.IO_ERROR
    with pytest.raises(CoordinatorError) as info:
        h.load(content_hash(b"never stored"), "a.txt")
    assert info.value.code is ErrorCode.FILE_NOT_FOUND


def test_scan_key_of_and_recent(store: tuple[History, LockManager]) -> None:
    h, locks = store
    _write(h, locks, "a.txt", None, b"1\n")
    _write(h, locks, "dir/b.txt", None, b"2\n")
    assert {ix.key for ix in h.scan()} == {"a.txt", "dir/b.txt"}
    assert h.key_of(file_stem("dir/b.txt")) == "dir/b.txt" and h.key_of("0" * 32) is None
    assert {e.path for e in h.recent(5)} == {"a.txt", "dir/b.txt"}
    assert h.usage()["index_files"] == 2 and h.usage()["objects"] == 2


def test_rewrite_drops_versions_compacts_and_other_writers_follow(store: tuple[History, LockManager]) -> None:
    h, locks = store
    other = History(h.base.parent, fsync=False)  # a writer in another process, descriptors open
    _write(h, locks, "a.txt", None, b"v1\n" * 100)
    for i in range(2, 6):
        _write(other, locks, "a.txt", f"v{i - 1}\n".encode() * 100, f"v{i}\n".encode() * 100)
    before = _pack_size(h, "a.txt")
    with locks.acquire("a.txt") as held:
        changed, taken_back = h.rewrite(held, "a.txt", {1, 2, 3, 5}, lambda: content_hash(b"v5\n" * 100))
    assert changed and taken_back == 0
    assert [e.version for e in h.entries("a.txt")] == [5, 4]  # the newest is kept whatever the plan
    assert _pack_size(h, "a.txt") < before
    assert len(list(h.packs.glob("*.pack"))) == 1 and not h.orphan_packs()
    # The other writer's descriptors point at the replaced files: it must follow, not append to them.
    _write(other, locks, "a.txt", b"v5\n" * 100, b"v6\n" * 100)
    assert [e.version for e in h.entries("a.txt")] == [6, 5, 4]
    for i in (4, 5, 6):
        assert h.load(content_hash(f"v{i}\n".encode() * 100), "a.txt") == f"v{i}\n".encode() * 100
    assert h.load(content_hash(b"v3\n" * 100), "a.txt")  # v4's pre-image is still referenced


def test_earlier_format_is_read_and_moved_into_a_pack(store: tuple[History, LockManager]) -> None:
    """Index lines without locations and contents as files of their own (the earlier format)."""
    h, locks = store
    old, new = b"old\n", b"new\n"
    for data in (old,):
        obj = h.object_path(content_hash(data))
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(data)
    line = {"version": 1, "time": 1.0, "path": "a.txt", "before": content_hash(old), "after": content_hash(new)}
    line.update(FIELDS)
    Path(h.index_path("a.txt")).write_text(json.dumps(line) + "\n")
    with open(locks.path_for("a.txt"), "wb") as f:
        f.write((1).to_bytes(8, "little"))  # the earlier lock file: a bare counter
    assert h.load(content_hash(old), "a.txt") == old
    ix = next(h.scan())
    assert ix.loose_references() == {content_hash(old), content_hash(new)}
    with locks.acquire("a.txt") as held:
        assert h.rewrite(held, "a.txt", set(), lambda: content_hash(new))[0]
    os.unlink(h.object_path(content_hash(old)))
    assert h.load(content_hash(old), "a.txt") == old  # now from the pack
    assert next(h.scan()).loose_references() == {content_hash(new)}  # never stored: nothing to move
    assert _write(h, locks, "a.txt", new, b"newer\n").entry.version == 2


@pytest.mark.parametrize(
    ("session", "path", "before", "reverts", "b_at"),
    [
        ("solo", "c.txt", "a" * 32, None, (10, 4000)),
        ('q"uote\\ é\n', "dir/ü\udcff.txt", None, 7, None),  # escapes, non-ASCII, a surrogate-escaped name
        ("s", "x", "", 0, (0, 0)),
    ],
)
def test_an_index_line_is_the_json_of_its_entry(
    session: str, path: str, before: str | None, reverts: int | None, b_at: tuple[int, int] | None
) -> None:
    from coordinator.history._format import HistoryEntry, _escape, _fields_line, _line_bytes, _parse

    entry = HistoryEntry(
        version=12,
        time=1796146335.5829766,
        session=session,
        operation="edit",
        path=path,
        before=before,
        after="b" * 32,
        size_before=4000,
        size_after=4001,
        first_line=17,
        last_line=18,
        reverts=reverts,
    )
    record = entry.to_dict()
    if b_at is not None:
        record["before_at"] = list(b_at)
    record["after_at"] = [4020, 4001]
    line = _line_bytes(entry, b_at, (4020, 4001))
    assert line == json.dumps(record, separators=(",", ":")).encode()
    assert _parse(line) == (entry, b_at, (4020, 4001))
    for a_at in ((4020, 4001), None):  # the write path's one-format line: the same bytes
        assert _fields_line(astuple(entry), _escape(path), b_at, a_at) == _line_bytes(entry, b_at, a_at) + b"\n"
    call = replace(entry, call='tool-1"\u00e9', time=1700000000.0)  # a tool call's id; a time without a fraction
    assert _fields_line(astuple(call), _escape(path), b_at, None) == _line_bytes(call, b_at, None) + b"\n"


def test_a_handle_in_use_outlives_its_eviction(store: tuple[History, LockManager]) -> None:
    """More paths than stay open: a path's descriptors evicted while a write holds them stay open for that
    write, and close once it lets them go; the next write of the path opens them again."""
    from coordinator.history._format import _MAX_OPEN

    h, _ = store
    held = h._handles("a.txt", 0)
    fds = (held.index_fd, held.pack_fd)
    for i in range(_MAX_OPEN + 5):
        h._handles(f"p{i}.txt", 0)
    assert "a.txt" not in h._open and len(h._open) == _MAX_OPEN
    for fd in fds:
        os.fstat(fd)  # still open
    del held
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    again = h._handles("a.txt", 0)
    assert again is h._handles("a.txt", 0)  # kept while current
    newer = h._handles("a.txt", 1)  # another pack generation (gc): opened anew
    assert newer is not again and again.index_fd >= 0  # the superseded one stays open while held
    h.close()
    assert newer.index_fd == newer.pack_fd == -1


def test_a_head_rewritten_whole_unless_the_disk_holds_it_whole(store: tuple[History, LockManager]) -> None:
    """A head record from an earlier lock file (the bare counter), or one whose last write failed, is
    written whole when the next version number is given out; a whole one gets its counter alone."""
    from coordinator.history._format import _HEAD

    h, locks = store
    with locks.acquire("a.txt") as held:
        os.pwrite(held.fd, (41).to_bytes(8, "little"), 0)  # an earlier lock file
        head = h.read_head(held)
        assert not head.whole
        h.commit(
            held,
            h.begin(
                held,
                "a.txt",
                before=None,
                before_digest=None,
                after=b"x",
                after_digest=content_hash(b"x"),
                head=head,
                **FIELDS,
            ),
        )
        raw = os.pread(held.fd, 100, 0)
        assert len(raw) == _HEAD.size and _HEAD.unpack(raw)[:2] == (42, 42)
        head = h.read_head(held)
        assert head.whole
        head.applied = 7  # a change whose write fails: the next counter write must carry it
        with pytest.raises(OSError):
            head.write(type("Closed", (), {"fd": -1})())
        assert not head.whole
        head.write_counter(held, 43)
        assert _HEAD.unpack(os.pread(held.fd, 100, 0))[:2] == (43, 7)
        assert head.whole
        head.write_counter(held, 44)
        assert _HEAD.unpack(os.pread(held.fd, 100, 0))[:2] == (44, 7)


def test_a_failed_index_append_takes_back_the_contents(
    store: tuple[History, LockManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index line cannot be written (a full disk): begin raises, and the pack and the index are as
    they were (the version number given out is skipped, never reused)."""
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    index, packs = Path(h.index_path("a.txt")), _pack_size(h, "a.txt")
    size = index.stat().st_size

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("coordinator.history._store._write", full)
    with pytest.raises(OSError):
        _write(h, locks, "a.txt", b"one\n", b"two\n")
    assert (index.stat().st_size, _pack_size(h, "a.txt")) == (size, packs)
    monkeypatch.undo()
    assert _write(h, locks, "a.txt", b"one\n", b"two\n").entry.version == 3
    assert [e.version for e in h.entries("a.txt")] == [3, 1]


def test_short_writes_are_completed(store: tuple[History, LockManager], monkeypatch: pytest.MonkeyPatch) -> None:
    """A write or writev that takes only part of its bytes: the rest follows, and the entry and its
    contents read back whole."""
    h, locks = store
    real_write, real_writev = os.write, os.writev
    monkeypatch.setattr("coordinator.history._store._write", lambda fd, data: real_write(fd, data[:7]))
    monkeypatch.setattr(os, "writev", lambda fd, parts: real_writev(fd, [parts[0][:5]]))
    _write(h, locks, "a.txt", None, b"one\n")
    _write(h, locks, "a.txt", b"one\n", b"two\n" * 50)
    monkeypatch.undo()
    assert [e.version for e in h.entries("a.txt")] == [2, 1]
    assert h.load(content_hash(b"two\n" * 50), "a.txt") == b"two\n" * 50
    assert h.load(content_hash(b"one\n"), "a.txt") == b"one\n"


def test_the_entry_begin_makes_is_the_one_history_entry_makes(store: tuple[History, LockManager]) -> None:
    """`entry_of` (the write path's maker) against the dataclass's own constructor: equal, same field order,
    frozen, with every field as given."""
    import dataclasses

    from coordinator.history._format import HistoryEntry, entry_of

    h, locks = store
    entry = _write(h, locks, "a.txt", None, b"one\n").entry
    assert entry == HistoryEntry(**dataclasses.asdict(entry)) and entry.path == "a.txt" and entry.before is None
    args = (7, 1.5, "s", "edit", "p.txt", "b" * 32, "a" * 32, 3, 4, 5, 6, 2, "call-1")
    made = entry_of(*args)
    assert made == HistoryEntry(*args) and list(vars(made)) == [f.name for f in dataclasses.fields(HistoryEntry)]
    assert tuple(vars(made).values()) == args
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.version = 8  # type: ignore[misc]


def test_a_pending_write_gives_the_entry_its_index_line_holds(store: tuple[History, LockManager]) -> None:
    """`begin` keeps the entry's fields and makes the HistoryEntry only when asked: the same entry the index
    gives back, once made (the same object on a second ask); its version, time and new hash kept apart."""
    h, locks = store
    _write(h, locks, "a.txt", None, b"one\n")
    pending = _write(h, locks, "a.txt", b"one\n", b"two\n")
    newest = h.entries("a.txt")[0]
    assert (pending.version, pending.time, pending.after) == (2, newest.time, content_hash(b"two\n"))
    assert pending.entry == newest and pending.entry is pending.entry
    assert pending.entry.before == content_hash(b"one\n") and pending.entry.session == "s"
