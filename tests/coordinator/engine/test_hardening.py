"""Hardening of the file rules: printable messages for undecodable names, the OS's own write permission
(as a non-root user, in a child process that drops root), hard links to files outside the root, and
which refusal comes first for content that can never be read.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode


def _coord(root: Path) -> Coordinator:
    return Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none")


def _utf8(exc: CoordinatorError) -> str:
    """Everything a model or terminal gets from the refusal, encoded strictly (raises on a lone surrogate)."""
    text = json.dumps(exc.to_dict(), ensure_ascii=False) + str(exc) + exc.message
    text.encode("utf-8")
    return text


# --- messages are valid UTF-8 ----------------------------------------------------------------------------
def test_did_you_mean_an_undecodable_name_is_valid_utf8(root: Path) -> None:
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"x\n")
    with _coord(root) as c, pytest.raises(CoordinatorError) as exc:
        c.session("s").read("cafe.txt")
    assert exc.value.code == ErrorCode.FILE_NOT_FOUND
    _utf8(exc.value)
    assert "Did you mean caf\\xe9.txt?" in exc.value.message, exc.value.message
    assert exc.value.details["suggestion"] == "caf\\xe9.txt"


def test_link_to_an_undecodable_name_gives_valid_utf8_refusals(root: Path) -> None:
    """The resolved key (from the link's target) carries the undecodable byte into details."""
    with open(os.fsencode(root) + b"/caf\xe9.bin", "wb") as f:
        f.write(b"\x00\x01\x02binary")
    os.symlink(b"caf\xe9.bin", os.fsencode(root) + b"/to_bin")
    os.symlink(b"gone\xff.txt", os.fsencode(root) + b"/to_missing")
    with _coord(root) as c:
        s = c.session("s")
        with pytest.raises(CoordinatorError) as exc:
            s.read("to_bin")
        assert exc.value.code == ErrorCode.BINARY_FILE
        _utf8(exc.value)
        for call in (lambda: s.read("to_missing"), lambda: s.edit("to_missing", "a", "b")):
            with pytest.raises(CoordinatorError) as exc:
                call()
            assert exc.value.code == ErrorCode.FILE_NOT_FOUND
            _utf8(exc.value)
            assert exc.value.details["path"] == "gone\\xff.txt"  # the byte is shown escaped, not dropped


def test_a_message_changed_after_the_error_was_made_stays_valid_utf8() -> None:
    exc = CoordinatorError(ErrorCode.STALE, "x")
    exc.message += " last written by caf\udce9"
    exc.details["path"] = "caf\udce9.txt"
    exc.message.encode("utf-8")
    json.dumps(exc.to_dict(), ensure_ascii=False).encode("utf-8")
    assert exc.message.endswith("caf\\xe9")


def test_a_lease_pattern_outside_the_root_does_not_name_the_root(root: Path) -> None:
    from coordinator.state.leases import normalize_pattern

    with pytest.raises(CoordinatorError) as exc:
        normalize_pattern("/elsewhere/src/**", str(root))
    assert exc.value.code == ErrorCode.OUTSIDE_ROOT
    assert str(root) not in exc.value.message and "outside the repository" in exc.value.message


# --- the OS's own write permission ---------------------------------------------------------------------
NOBODY = 65534


def _in_child_as_nobody(fn: Callable[[], Any]) -> Any:
    """Run `fn` in a forked child that has given up root for the user and group nobody; return its
    (JSON-able) result. Forked, not exec'd: the interpreter lives under /root, which nobody cannot read, so
    the child uses the modules this process has already imported."""
    if os.geteuid() != 0:
        return fn()  # already not root: the rule under test applies as it is
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {"result": fn()}
        except BaseException as exc:  # reported to the parent
            out = {"error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    os.waitpid(pid, 0)
    out = json.loads(raw)
    assert "error" not in out, out["error"]
    return out["result"]


def _attempt(call: Callable[[], Any]) -> str:
    try:
        call()
    except CoordinatorError as exc:
        return exc.code.value
    return "written"


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A root that the user nobody can reach (tmp_path's parents are private to root)."""
    base = Path(tempfile.mkdtemp(prefix="ec-nobody-"))
    root = base / "repo"
    root.mkdir()
    if os.geteuid() == 0:
        os.chmod(base, 0o755)
        os.chown(root, NOBODY, NOBODY)
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _plant(path: Path, text: str, mode: int, owner: int | None) -> None:
    path.write_text(text)
    if owner is not None and os.geteuid() == 0:
        os.chown(path, owner, owner)
    path.chmod(mode)


def test_a_non_root_user_cannot_change_a_file_it_could_not_open_for_writing(shared_root: Path) -> None:
    """Replacing needs write permission on the folder only; the file's own permission must decide too."""
    root = shared_root
    me = NOBODY if os.geteuid() == 0 else os.geteuid()
    _plant(root / "ro.py", "a = 1\n", 0o444, me)  # the user's own file, read-only
    _plant(root / "ro_unread.py", "b = 1\n", 0o444, me)
    _plant(root / "theirs.py", "c = 1\n", 0o644, 0)  # another user's file, in the user's own folder
    _plant(root / "rw.py", "d = 1\n", 0o644, me)
    scratch = root.parent / "warm-up"
    scratch.mkdir()
    (scratch / "x.py").write_text("x = 1\n")
    with _coord(scratch) as warm:  # import what is imported lazily, before the child drops root
        s = warm.session("warm")
        s.read("x.py")
        s.edit("x.py", "x = 1", "x = 2")

    def scenario() -> dict[str, Any]:
        with _coord(root) as c:
            s = c.session("agent")
            s.read("ro.py")
            s.read("rw.py")
            out = {
                "edit": _attempt(lambda: s.edit("ro.py", "a = 1", "a = 2")),
                "write": _attempt(lambda: s.write("ro.py", "a = 3\n")),
                "multi_edit": _attempt(lambda: s.multi_edit("ro.py", [{"old_string": "1", "new_string": "4"}])),
                "unread": _attempt(lambda: s.edit("ro_unread.py", "b = 1", "b = 2")),
                "rw": _attempt(lambda: s.edit("rw.py", "d = 1", "d = 2")),
                "new": _attempt(lambda: s.write("new.py", "e = 1\n")),
            }
            s.read("theirs.py")
            out["theirs"] = _attempt(lambda: s.edit("theirs.py", "c = 1", "c = 2"))
            try:
                s.edit("ro.py", "a = 1", "a = 2")
            except CoordinatorError as exc:
                out["message"] = exc.message
            return out

    got = _in_child_as_nobody(scenario)
    refused = ErrorCode.PERMISSION_DENIED.value
    assert {k: got[k] for k in ("edit", "write", "multi_edit", "unread", "theirs")} == dict.fromkeys(
        ("edit", "write", "multi_edit", "unread", "theirs"), refused
    ), got
    assert got["rw"] == "written" and got["new"] == "written", got
    assert "read-only (mode 0444)" in got["message"] and "chmod u+w ro.py" in got["message"], got["message"]
    assert "nothing was written" in got["message"]
    assert (root / "ro.py").read_text() == "a = 1\n" and (root / "ro.py").stat().st_mode & 0o777 == 0o444
    assert (root / "ro_unread.py").read_text() == "b = 1\n"
    assert (root / "theirs.py").read_text() == "c = 1\n"
    assert (root / "rw.py").read_text() == "d = 2\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the decision for root")
def test_root_may_change_a_read_only_file_as_an_open_for_writing_would(root: Path) -> None:
    """Decision: root follows the same OS rule, and the kernel lets root open a 0444 file for writing."""
    path = root / "ro.py"
    path.write_text("a = 1\n")
    path.chmod(0o444)
    with _coord(root) as c:
        s = c.session("root-agent")
        s.read("ro.py")
        s.edit("ro.py", "a = 1", "a = 2")
    assert path.read_text() == "a = 2\n"
    assert path.stat().st_mode & 0o777 == 0o444  # the mode is kept


# --- hard links ------------------------------------------------------------------------------------------
def test_hard_link_to_an_outside_file_is_read_but_never_written_through(tmp_path: Path) -> None:
    """Decision (README, Semantics): a multiply-linked file is read like any other; a change replaces the
    name inside the root only (a new file), so the outside file, and every other link, keep their bytes."""
    root, outside = tmp_path / "repo", tmp_path / "store"
    root.mkdir()
    outside.mkdir()
    (outside / "lib.js").write_text("export const v = 1;\n")
    os.link(outside / "lib.js", root / "lib.js")  # what pnpm or `cp -l` make
    with _coord(root) as c:
        s = c.session("agent")
        assert s.read("lib.js").content == "export const v = 1;\n"
        s.edit("lib.js", "v = 1", "v = 2")
        assert (root / "lib.js").read_text() == "export const v = 2;\n"
        assert (outside / "lib.js").read_text() == "export const v = 1;\n"
        assert os.stat(outside / "lib.js").st_ino != os.stat(root / "lib.js").st_ino  # replaced, not written into
        s.undo("lib.js")
    assert (root / "lib.js").read_text() == "export const v = 1;\n"
    assert (outside / "lib.js").read_text() == "export const v = 1;\n"


# --- which refusal comes first -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x00\x01\x02\x03binary\x00", ErrorCode.BINARY_FILE),
        (b"caf\xe9 cr\xe8me\n", ErrorCode.UNSUPPORTED_ENCODING),
    ],
)
def test_content_that_read_can_never_return_is_refused_for_itself_not_as_unread(
    root: Path, data: bytes, code: ErrorCode
) -> None:
    (root / "f.dat").write_bytes(data)
    (root / "text.txt").write_text("hello\n")
    with _coord(root) as c:
        s = c.session("agent")
        with pytest.raises(CoordinatorError) as exc:
            s.read("f.dat")
        assert exc.value.code == code  # Read can never succeed on it ...
        for call in (
            lambda: s.edit("f.dat", "caf", "cafe"),
            lambda: s.write("f.dat", "text now\n"),
            lambda: s.multi_edit("f.dat", [{"old_string": "caf", "new_string": "x"}]),
        ):
            with pytest.raises(CoordinatorError) as exc:
                call()
            assert exc.value.code == code, exc.value  # ... so "Read it first" would be a loop
        with pytest.raises(CoordinatorError) as exc:
            s.edit("text.txt", "hello", "bye")
        assert exc.value.code == ErrorCode.NOT_READ  # readable content: read first, as before
    assert (root / "f.dat").read_bytes() == data


def test_writing_below_a_file_says_it_is_a_file(root: Path) -> None:
    (root / "a.txt").write_text("x\n")
    with _coord(root) as c, pytest.raises(CoordinatorError) as exc:
        c.session("s").write("a.txt/b.txt", "y\n")
    assert exc.value.code == ErrorCode.FILE_NOT_FOUND
    assert "'a.txt' is a file, not a folder" in exc.value.message, exc.value.message


def test_a_repository_the_user_may_not_write_is_refused_at_start_not_with_an_oserror(shared_root: Path) -> None:
    """The state folder cannot be made: a coded refusal from the constructor, saying what to do."""
    locked = shared_root / "locked"
    locked.mkdir()
    if os.geteuid() == 0:
        os.chown(locked, 0, 0)
    locked.chmod(0o755)
    (shared_root.parent / "warm-up").mkdir()
    with _coord(shared_root.parent / "warm-up"):
        pass

    def scenario() -> list[str]:
        try:
            _coord(locked).close()
        except CoordinatorError as exc:
            return [exc.code.value, exc.message]
        except OSError as exc:
            return ["OSError", repr(exc)]
        return ["started", ""]

    code, message = _in_child_as_nobody(scenario)
    if os.geteuid() != 0 and os.access(locked, os.W_OK):  # pragma: no cover - a user who owns it anyway
        pytest.skip("this user may write the folder")
    assert code == ErrorCode.PERMISSION_DENIED.value, message
    assert "state_dir=" in message
