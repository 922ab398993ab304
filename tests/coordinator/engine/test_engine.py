"""The engine's semantics through the public API (single process, fakeredis)."""

from __future__ import annotations

import os
import socket
import stat
import threading
from typing import Any

import fakeredis
import pytest
import xxhash

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.disk import spares
from tests.conftest import touch_later, write_bytes


def codeof(fn, *a, **kw) -> ErrorCode:
    with pytest.raises(CoordinatorError) as ei:
        fn(*a, **kw)
    assert ei.value.message, "every refusal carries a message for the model"
    return ei.value.code


# --------------------------------------------------------------------------------------------------- read
@pytest.mark.topology
def test_read_numbers_lines_and_returns_exact_content(coord, root):
    write_bytes(root / "a.py", b"one\ntwo\r\nthree")
    r = coord.session("s").read("a.py")
    assert r.text == "     1\tone\n     2\ttwo\n     3\tthree"
    assert r.content == "one\ntwo\nthree"
    assert (r.start_line, r.num_lines, r.total_lines, r.unchanged) == (1, 3, 3, False)


def test_read_offset_limit_and_default_limit(coord, root):
    write_bytes(root / "big.txt", "".join(f"line {i}\n" for i in range(1, 2501)).encode())
    s = coord.session("s")
    r = s.read("big.txt", offset=10, limit=3)
    assert r.content == "line 10\nline 11\nline 12\n"
    assert r.text.splitlines()[0] == "    10\tline 10"
    assert (r.start_line, r.num_lines, r.total_lines) == (10, 3, 2500)
    r = s.read("big.txt")
    assert r.num_lines == 2000 and r.total_lines == 2500
    assert "offset=2001" in r.message


def test_long_lines_are_cut_in_text_only(coord, root):
    long = "x" * 2500
    write_bytes(root / "l.txt", (long + "\nshort\n").encode())
    r = coord.session("s").read("l.txt")
    assert r.content.splitlines()[0] == long
    first = r.text.splitlines()[0]
    assert len(first) < 2300 and "truncated" in first


def test_large_file_needs_limit_and_hard_cap_applies(root):
    write_bytes(root / "huge.txt", b"abcdefgh\n" * 40_000)  # 360 KB
    with Coordinator(root, redis_client=fakeredis.FakeRedis()) as c:
        s = c.session("s")
        with pytest.raises(CoordinatorError) as ei:
            s.read("huge.txt")
        assert ei.value.code == ErrorCode.TOO_LARGE and "offset" in ei.value.message
        assert s.read("huge.txt", offset=1, limit=5).num_lines == 5
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), max_file_bytes=100_000) as c:
        assert codeof(c.session("s").read, "huge.txt", limit=5) == ErrorCode.TOO_LARGE


def test_empty_file_and_offset_past_end_get_notes(coord, root):
    write_bytes(root / "e.txt", b"")
    write_bytes(root / "f.txt", b"a\nb\n")
    s = coord.session("s")
    r = s.read("e.txt")
    assert r.total_lines == 0 and "empty" in r.text
    r = s.read("f.txt", offset=10)
    assert r.num_lines == 0 and "2 lines" in r.text


def test_refuses_directories_binaries_and_encodings(coord, root):
    (root / "d").mkdir()
    write_bytes(root / "bin.dat", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write_bytes(root / "latin.txt", "caf\xe9 cr\xe8me\n".encode("latin-1"))
    s = coord.session("s")
    assert codeof(s.read, "d") == ErrorCode.IS_DIRECTORY
    assert codeof(s.read, "bin.dat") == ErrorCode.BINARY_FILE
    assert codeof(s.read, "latin.txt") == ErrorCode.UNSUPPORTED_ENCODING


def _in_thread(fn, timeout=5.0):
    out: dict = {}

    def run():
        try:
            out["v"] = fn()
        except BaseException as e:
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the call blocked"
    return out


def test_fifo_socket_and_device_are_refused_without_blocking(coord, root):
    os.mkfifo(root / "pipe")
    s = coord.session("s")
    out = _in_thread(lambda: s.read("pipe"))
    assert out["e"].code == ErrorCode.SPECIAL_FILE
    out = _in_thread(lambda: s.edit("pipe", "a", "b"))
    assert out["e"].code == ErrorCode.SPECIAL_FILE
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    try:
        assert codeof(s.read, "sock") == ErrorCode.SPECIAL_FILE
    finally:
        sock.close()
    try:
        os.mknod(root / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs privileges")
    assert codeof(s.read, "null") == ErrorCode.SPECIAL_FILE


@pytest.mark.parametrize(
    ("existing", "asked", "hint"),
    [
        ("config.yaml", "config.yml", "config.yaml"),
        ("README.md", "readme.md", "README.md"),
        ("handlers.py", "handler.py", "handlers.py"),
    ],
)
def test_missing_path_gets_did_you_mean(coord, root, existing, asked, hint):
    write_bytes(root / "pkg" / existing, b"x\n")
    with pytest.raises(CoordinatorError) as ei:
        coord.session("s").read(f"pkg/{asked}")
    assert ei.value.code == ErrorCode.FILE_NOT_FOUND
    assert f"Did you mean pkg/{hint}?" in ei.value.message


def test_unchanged_answer_for_same_range_only(coord, root):
    f = root / "u.txt"
    write_bytes(f, b"a\nb\nc\n")
    s = coord.session("s")
    assert not s.read("u.txt").unchanged
    again = s.read("u.txt")
    assert again.unchanged and "unchanged" in again.text.lower()
    assert not s.read("u.txt", offset=2).unchanged
    assert s.read("u.txt", offset=2).unchanged
    write_bytes(f, b"a\nB\nc\n")
    assert not s.read("u.txt", offset=2).unchanged
    # touched, same bytes: still unchanged (content decides)
    touch_later(f)
    assert s.read("u.txt", offset=2).unchanged


@pytest.mark.topology
def test_read_records_read_state(coord, root):
    f = root / "r.txt"
    write_bytes(f, b"hello\nworld\n")
    coord.session("s").read("r.txt", offset=2, limit=1)
    rs = coord.state.get("s", "r.txt")
    st = f.stat()
    assert rs is not None
    assert rs.hash == xxhash.xxh3_128_hexdigest(b"hello\nworld\n")
    assert (rs.mtime_ns, rs.size, rs.offset, rs.limit) == (st.st_mtime_ns, st.st_size, 2, 1)
    assert rs.time > 0


# --------------------------------------------------------------------------------------------------- edit
@pytest.mark.topology
def test_edit_view_rules(coord, root):
    f = root / "v.py"
    write_bytes(f, b"a = 1\n")
    s = coord.session("s")
    assert codeof(s.edit, "v.py", "a = 1", "a = 1") == ErrorCode.NO_CHANGE
    assert codeof(s.edit, "v.py", "a = 1", "a = 2") == ErrorCode.NOT_READ
    s.read("v.py")
    write_bytes(f, b"a = 5\n")
    assert codeof(s.edit, "v.py", "a = 5", "a = 2") == ErrorCode.STALE
    assert f.read_bytes() == b"a = 5\n"
    s.read("v.py")
    touch_later(f)  # same bytes, new mtime: not stale
    s.edit("v.py", "a = 5", "a = 2")
    assert f.read_bytes() == b"a = 2\n"


def test_stale_after_an_outside_change_says_so_rather_than_naming_the_last_writer(coord, root):
    """The session that wrote the newest version is refused after another program changed the file: the
    refusal says the file changed outside the coordinator (naming the session itself as the last writer
    would send the model looking for a session that does not exist)."""
    f = root / "ext.py"
    write_bytes(f, b"a = 1\n")
    s, t = coord.session("ext"), coord.session("t")
    s.read("ext.py")
    s.edit("ext.py", "a = 1", "a = 2")
    write_bytes(f, b"a = 3\n")  # an outside program
    with pytest.raises(CoordinatorError) as ei:
        s.edit("ext.py", "a = 3", "a = 4")
    assert ei.value.code is ErrorCode.STALE
    assert "changed outside the coordinator after version 1" in ei.value.message
    assert "last written by session ext" not in ei.value.message
    t.read("ext.py")
    t.edit("ext.py", "a = 3", "a = 5")  # now the newest write is the coordinator's again
    with pytest.raises(CoordinatorError) as ei:
        s.edit("ext.py", "a = 5", "a = 4")
    assert "last written by session t" in ei.value.message
    assert "changed outside the coordinator" not in ei.value.message


def test_rewrite_with_identical_bytes_is_not_stale(coord, root):
    f = root / "fmt.py"
    write_bytes(f, b"x = 1\n")
    s = coord.session("s")
    s.read("fmt.py")
    write_bytes(f, b"x = 1\n")  # a formatter rewriting identical bytes
    s.edit("fmt.py", "x = 1", "x = 2")
    assert f.read_bytes() == b"x = 2\n"


def test_empty_old_string_creates_fills_or_refuses(coord, root):
    s = coord.session("s")
    r = s.edit("new/deep/file.txt", "", "hello\n")
    assert r.created and (root / "new/deep/file.txt").read_bytes() == b"hello\n"
    write_bytes(root / "blank.txt", b"  \n\n")
    s.read("blank.txt")
    s.edit("blank.txt", "", "filled\n")
    assert (root / "blank.txt").read_bytes() == b"filled\n"
    write_bytes(root / "full.txt", b"content\n")
    s.read("full.txt")
    assert codeof(s.edit, "full.txt", "", "x") == ErrorCode.FILE_EXISTS
    write_bytes(root / "near.txt", b"x\n")
    with pytest.raises(CoordinatorError) as ei:
        s.edit("neer.txt", "x", "y")
    assert ei.value.code == ErrorCode.FILE_NOT_FOUND and "near.txt" in ei.value.message
    assert not (root / "neer.txt").exists()


def test_curly_quotes_match_and_keep_style(coord, root):
    f = root / "q.md"
    write_bytes(f, "He said “hello” and it’s fine.\n".encode())
    s = coord.session("s")
    s.read("q.md")
    s.edit("q.md", 'said "hello" and it\'s', 'said "goodbye" and it\'s')
    assert f.read_text() == "He said “goodbye” and it’s fine.\n"


def test_ambiguous_and_replace_all_and_literal(coord, root):
    f = root / "m.txt"
    write_bytes(f, b"foo\nfoo\nbar foo\n")
    s = coord.session("s")
    s.read("m.txt")
    with pytest.raises(CoordinatorError) as ei:
        s.edit("m.txt", "foo", "baz")
    assert ei.value.code == ErrorCode.AMBIGUOUS and "3" in ei.value.message
    assert "replace_all" in ei.value.message
    r = s.edit("m.txt", "foo", r"$& \1 $1", replace_all=True)
    assert r.replacements == 3
    assert f.read_text() == "$& \\1 $1\n$& \\1 $1\nbar $& \\1 $1\n"


def test_deleting_a_whole_line_removes_its_newline(coord, root):
    f = root / "del.py"
    write_bytes(f, b"keep1\ndrop me\nkeep2\n")
    s = coord.session("s")
    s.read("del.py")
    s.edit("del.py", "drop me", "")
    assert f.read_bytes() == b"keep1\nkeep2\n"


def test_no_match(coord, root):
    write_bytes(root / "n.txt", b"abc\n")
    s = coord.session("s")
    s.read("n.txt")
    assert codeof(s.edit, "n.txt", "xyz", "q") == ErrorCode.NO_MATCH


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"a\r\nold\r\nc\r\n", b"a\r\nnew\r\nline\r\nc\r\n"),
        (b"a\nb\r\nold\r\nc\n", b"a\nb\r\nnew\r\nline\r\nc\n"),
        (b"\xef\xbb\xbfa\nold\nc\n", b"\xef\xbb\xbfa\nnew\nline\nc\n"),
        ("a\nold\nc\n".encode("utf-16"), "a\nnew\nline\nc\n".encode("utf-16")),
        (
            b"\xfe\xff" + "a\nold\nc\n".encode("utf-16-be"),
            b"\xfe\xff" + "a\nnew\nline\nc\n".encode("utf-16-be"),
        ),
    ],
    ids=["crlf", "mixed", "utf8-bom", "utf16", "utf16-be"],
)
def test_line_endings_and_encodings_are_kept(coord, root, raw, expected):
    f = root / "enc.txt"
    write_bytes(f, raw)
    s = coord.session("s")
    s.read("enc.txt")
    s.edit("enc.txt", "old\n", "new\nline\n")
    assert f.read_bytes() == expected


def test_mode_bits_are_kept(coord, root):
    f = root / "run.sh"
    write_bytes(f, b"echo hi\n")
    os.chmod(f, 0o751)
    s = coord.session("s")
    s.read("run.sh")
    s.edit("run.sh", "hi", "there")
    assert stat.S_IMODE(f.stat().st_mode) == 0o751


def test_symlinks_inside_followed_outside_refused(coord, root, tmp_path):
    write_bytes(root / "real.txt", b"v1\n")
    (root / "link.txt").symlink_to("real.txt")
    outside = tmp_path / "outside.txt"
    write_bytes(outside, b"secret\n")
    (root / "escape.txt").symlink_to(outside)
    (root / "dirlink").symlink_to(tmp_path)
    s = coord.session("s")
    s.read("link.txt")
    s.edit("link.txt", "v1", "v2")
    assert (root / "link.txt").is_symlink() and (root / "real.txt").read_bytes() == b"v2\n"
    assert codeof(s.read, "escape.txt") == ErrorCode.OUTSIDE_ROOT
    assert codeof(s.edit, "escape.txt", "secret", "x") == ErrorCode.OUTSIDE_ROOT
    assert codeof(s.write, "dirlink/outside.txt", "x") == ErrorCode.OUTSIDE_ROOT
    assert codeof(s.read, "../outside.txt") == ErrorCode.OUTSIDE_ROOT
    assert codeof(s.write, str(outside), "x") == ErrorCode.OUTSIDE_ROOT
    assert codeof(s.read, ".edit-coordinator/.gitignore") == ErrorCode.OUTSIDE_ROOT
    assert outside.read_bytes() == b"secret\n"
    assert s.read(str(root / "real.txt")).content == "v2\n"


def test_bad_arguments_are_invalid_argument(coord, root):
    write_bytes(root / "x.txt", b"x\n")
    s = coord.session("s")
    assert codeof(s.read, "x.txt", offset=-1) == ErrorCode.INVALID_ARGUMENT
    assert codeof(s.read, "x.txt", limit=0) == ErrorCode.INVALID_ARGUMENT
    assert codeof(s.read, "x\x00.txt") == ErrorCode.INVALID_ARGUMENT
    assert codeof(s.read, 42) == ErrorCode.INVALID_ARGUMENT
    assert codeof(s.edit, "x.txt", None, "y") == ErrorCode.INVALID_ARGUMENT
    assert codeof(s.multi_edit, "x.txt", []) == ErrorCode.INVALID_ARGUMENT
    assert codeof(coord.session, "has space") == ErrorCode.INVALID_ARGUMENT


def test_edit_result_snippet_and_message(coord, root):
    f = root / "s.py"
    write_bytes(f, "".join(f"l{i}\n" for i in range(1, 21)).encode())
    s = coord.session("s")
    s.read("s.py")
    r = s.edit("s.py", "l10\n", "ten\nTEN\n")
    assert r.replacements == 1 and r.start_line == 10
    assert "Snippet (around line 10 after the edit)" in r.message
    nums = [int(line.split("\t")[0]) for line in r.snippet.splitlines()]
    assert nums == list(range(6, 16))
    assert "    10\tten" in r.snippet and "    11\tTEN" in r.snippet


@pytest.mark.topology
def test_multi_edit_in_order_all_or_nothing(coord, root):
    f = root / "me.py"
    write_bytes(f, b"alpha\nbeta\ngamma\n")
    s = coord.session("s")
    s.read("me.py")
    r = s.multi_edit(
        "me.py",
        [{"old_string": "alpha", "new_string": "ALPHA"}, {"old_string": "ALPHA\nbeta", "new_string": "AB"}],
    )
    assert f.read_bytes() == b"AB\ngamma\n" and r.replacements == 2
    before = f.read_bytes()
    assert (
        codeof(
            s.multi_edit,
            "me.py",
            [{"old_string": "AB", "new_string": "x"}, {"old_string": "nope", "new_string": "y"}],
        )
        == ErrorCode.NO_MATCH
    )
    assert f.read_bytes() == before
    assert (
        codeof(
            s.multi_edit,
            "me.py",
            [{"old_string": "AB", "new_string": "new text"}, {"old_string": "text", "new_string": "z"}],
        )
        == ErrorCode.INVALID_ARGUMENT
    )
    assert f.read_bytes() == before


@pytest.mark.topology
def test_consecutive_edits_need_no_reread_but_others_go_stale(coord, root):
    write_bytes(root / "c.txt", b"1\n2\n")
    a, b = coord.session("a"), coord.session("b")
    a.read("c.txt")
    b.read("c.txt")
    a.edit("c.txt", "1", "one")
    a.edit("c.txt", "2", "two")
    assert codeof(b.edit, "c.txt", "1", "x") == ErrorCode.STALE
    b.read("c.txt")
    b.edit("c.txt", "one", "uno")
    assert (root / "c.txt").read_bytes() == b"uno\ntwo\n"


# -------------------------------------------------------------------------------------------------- write
@pytest.mark.topology
def test_write_rules(coord, root):
    s = coord.session("s")
    r = s.write("pkg/mod/new.py", "print('hi')\n")
    assert r.created and (root / "pkg/mod/new.py").read_bytes() == b"print('hi')\n"
    write_bytes(root / "exist.txt", b"a\r\nb\r\n")
    assert codeof(s.write, "exist.txt", "x\n") == ErrorCode.NOT_READ
    s.read("exist.txt")
    r = s.write("exist.txt", "x\ny\n")
    assert not r.created and (root / "exist.txt").read_bytes() == b"x\ny\n"  # as given: LF stays LF
    write_bytes(root / "u16.txt", "hello\n".encode("utf-16"))
    s.read("u16.txt")
    s.write("u16.txt", "bye\n")
    assert (root / "u16.txt").read_bytes() == "bye\n".encode("utf-16")
    other = coord.session("o")
    other.read("exist.txt")
    s.write("exist.txt", "z\n")
    assert codeof(other.write, "exist.txt", "w\n") == ErrorCode.STALE


# ---------------------------------------------------------------------------------------- history / undo
@pytest.mark.topology
def test_history_and_undo(coord, root):
    f = root / "h.txt"
    write_bytes(f, b"v0\n")
    a, b = coord.session("a"), coord.session("b")
    a.read("h.txt")
    a.edit("h.txt", "v0", "v1")
    b.read("h.txt")
    b.edit("h.txt", "v1", "v2")
    h = coord.history("h.txt")
    assert [(e.version, e.session, e.operation) for e in h] == [(2, "b", "edit"), (1, "a", "edit")]
    assert coord.history_store.load(h[1].before) == b"v0\n"  # pre-image kept
    # a's view is stale: undo goes through the same check
    assert codeof(a.undo, "h.txt") == ErrorCode.STALE
    b.undo("h.txt")
    assert f.read_bytes() == b"v1\n"
    assert coord.history("h.txt")[0].operation == "undo"
    assert codeof(b.undo, "h.txt") == ErrorCode.NO_CHANGE  # nothing of b's left to undo
    b.redo("h.txt")  # the undo itself is undoable
    assert f.read_bytes() == b"v2\n"
    assert codeof(b.undo, "h.txt", 1) == ErrorCode.STALE  # a's line was rewritten by b since: refused
    b.undo("h.txt")
    b.undo("h.txt", version=1)
    assert f.read_bytes() == b"v0\n"


def test_undo_of_creation_removes_file(coord, root):
    s = coord.session("s")
    s.write("made.txt", "x\n")
    s.undo("made.txt")
    assert not (root / "made.txt").exists()


def test_history_survives_a_new_redis(root):
    write_bytes(root / "k.txt", b"a\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        s = c.session("s")
        s.read("k.txt")
        s.edit("k.txt", "a", "b")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        assert [e.version for e in c.history("k.txt")] == [1]
        s = c.session("s")
        assert codeof(s.edit, "k.txt", "b", "c") == ErrorCode.NOT_READ  # read state was lost
        s.read("k.txt")
        s.undo("k.txt", version=1)
        assert (root / "k.txt").read_bytes() == b"a\n"


# ----------------------------------------------------------------------------------------- locks / state
def test_lock_timeout_writes_nothing(root):
    write_bytes(root / "lk.txt", b"a\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), lock_timeout=0.2) as c:
        s = c.session("s")
        s.read("lk.txt")
        rp = c.resolve("lk.txt")
        held = c.locks.acquire(rp.key)
        try:
            assert codeof(s.edit, "lk.txt", "a", "b") == ErrorCode.LOCK_TIMEOUT
        finally:
            held.release()
        assert (root / "lk.txt").read_bytes() == b"a\n"
        lock_files = os.listdir(c.state_dir / "locks")
        assert len(lock_files) == 1 and lock_files[0].endswith(".lock")
        s.edit("lk.txt", "a", "b")  # released: the next one gets it at once
        assert (root / "lk.txt").read_bytes() == b"b\n"


def test_redis_down_fails_closed(root):
    server = fakeredis.FakeServer()
    write_bytes(root / "rd.txt", b"a\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(server=server)) as c:
        s = c.session("s")
        s.read("rd.txt")
        server.connected = False
        assert codeof(s.edit, "rd.txt", "a", "b") == ErrorCode.STATE_UNAVAILABLE
        assert codeof(s.write, "new.txt", "x") == ErrorCode.STATE_UNAVAILABLE
        assert codeof(s.read, "rd.txt") == ErrorCode.STATE_UNAVAILABLE
        assert (root / "rd.txt").read_bytes() == b"a\n" and not (root / "new.txt").exists()
        server.connected = True
        s.edit("rd.txt", "a", "b")
        assert (root / "rd.txt").read_bytes() == b"b\n"


def test_no_temp_files_left_in_repo(coord, root):
    s = coord.session("s")
    write_bytes(root / "t.txt", b"a\n")
    s.read("t.txt")
    for i in range(5):
        s.edit("t.txt", "a" if i == 0 else f"b{i - 1}", f"b{i}")
    assert sorted(p.name for p in root.iterdir()) == [".edit-coordinator", "t.txt"]
    left = os.listdir(coord.state_dir / "tmp")  # only the next writes' spares, empty (spares.py)
    assert 0 < len(left) <= spares.KEEP and all(n.startswith(".spare.ec-") for n in left)
    assert all((coord.state_dir / "tmp" / n).stat().st_size == 0 for n in left)
    coord.close()
    assert os.listdir(coord.state_dir / "tmp") == []


def _session_process(root: str, conn: Any) -> None:
    """A long-lived process with its own Coordinator (and so its own cached views): runs (session, op,
    args) commands from the pipe and answers "ok" or the refusal's code."""
    with Coordinator(root, durability="none") as c:
        while (cmd := conn.recv()) is not None:
            session, op, args = cmd
            try:
                getattr(c.session(session), op)(*args)
                conn.send("ok")
            except CoordinatorError as exc:
                conn.send(exc.code.value)


def test_same_session_in_two_processes_shares_its_view(real_redis_root):
    """A view cached by one process is never the last word: a refusal is checked again against Redis.

    Two real processes, each with its own Coordinator, on the embedded (real) Redis server."""
    import multiprocessing

    root = real_redis_root
    f = root / "shared.txt"
    write_bytes(f, b"v1\n")
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for _ in range(2):
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_session_process, args=(str(root), there), daemon=True)
        proc.start()
        pipes.append(here)
        procs.append(proc)
    a, b = pipes

    def ask(conn: Any, session: str, op: str, *args: Any) -> str:
        conn.send((session, op, args))
        assert conn.poll(60), "the session process did not answer"
        return conn.recv()

    try:
        assert ask(a, "s", "read", "shared.txt") == "ok"
        write_bytes(f, b"v2\n")  # an outside change
        assert ask(b, "s", "read", "shared.txt") == "ok"  # the same session, in another process, sees it
        assert ask(a, "s", "edit", "shared.txt", "v2", "v3") == "ok"  # a's cached view (v1) is outdated
        assert f.read_bytes() == b"v3\n"
        # and the other way round: b's cached view (v2) is outdated by a's write, Redis has v3
        assert ask(b, "s", "edit", "shared.txt", "v3", "v4") == "ok"
        assert f.read_bytes() == b"v4\n"
        # another session's view stays missing, and a stale session stays refused
        assert ask(a, "t", "edit", "shared.txt", "v4", "x") == "not_read"
        write_bytes(f, b"v5\n")
        assert ask(b, "s", "edit", "shared.txt", "v5", "x") == "stale"
        assert f.read_bytes() == b"v5\n"
    finally:
        for conn in pipes:
            conn.send(None)
        for proc in procs:
            proc.join(30)


def test_failed_replace_writes_nothing_and_leaves_no_history(coord, root, monkeypatch):
    """A disk error at the replace (disk full): clear error, file intact, no version recorded."""
    import errno

    from coordinator.disk import fsio

    f = root / "full.txt"
    write_bytes(f, b"keep me\n")
    s = coord.session("s")
    s.read("full.txt")
    real_write = os.write

    def failing_write(fd, data):
        if len(data) == len(b"changed me\n"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(fsio.os, "write", failing_write)
    with pytest.raises(CoordinatorError) as ei:
        s.edit("full.txt", "keep", "changed")
    monkeypatch.undo()
    assert ei.value.code == ErrorCode.IO_ERROR and "disk is full" in ei.value.message
    assert f.read_bytes() == b"keep me\n"
    assert coord.history("full.txt") == []
    assert os.listdir(coord.state_dir / "tmp") == []
    s.edit("full.txt", "keep", "changed")  # the session's view is still current
    assert [e.version for e in coord.history("full.txt")] == [1]


def test_refusals_are_counted_by_code(root):
    server = fakeredis.FakeServer()
    write_bytes(root / "cnt.txt", b"a\nb\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(server=server)) as c:
        a, b = c.session("a"), c.session("b")
        a.read("cnt.txt")
        b.read("cnt.txt")
        a.edit("cnt.txt", "a", "A")
        for _ in range(2):
            with pytest.raises(CoordinatorError):
                b.edit("cnt.txt", "b", "B")
        with pytest.raises(CoordinatorError):
            a.edit("cnt.txt", "zzz", "B")
        a.edit("cnt.txt", "b", "B")  # the next write carries the counts to Redis
        assert c.state.error_counts() == {"stale": 2, "no_match": 1}
        with pytest.raises(CoordinatorError):
            b.edit("cnt.txt", "B", "b")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(server=server)) as c:
        assert c.state.error_counts()["stale"] == 3  # flushed at close
