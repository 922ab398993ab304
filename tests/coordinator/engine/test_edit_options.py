"""Edit options through the public API: flexible matching (opt-in), placeholder refusal (default on), the
filled-empty-file message, the Did-you-mean cut-off, and what a rebased edit says about nearby changes."""

from __future__ import annotations

from pathlib import Path

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from tests.refusals import refused

SRC = "class A:\n    def f(self):\n        x = 1   \n        return x\n"


def test_flexible_matching_is_opt_in_per_coordinator_or_session(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text(SRC)
    exact, flex = coord.session("e"), coord.session("f", match="flexible")
    assert coord.match == "exact" and exact.match == "exact" and flex.match == "flexible"
    for s in (exact, flex):
        s.read("a.py")
    refused(ErrorCode.NO_MATCH, exact.edit, "a.py", "def f(self):\n    x = 1\n", "def f(self):\n    x = 2\n")
    r = flex.edit("a.py", "def f(self):\n    x = 1\n", "def f(self):\n    x = 2\n")
    assert (root / "a.py").read_text() == SRC.replace("x = 1   ", "x = 2")
    assert r.match == "indentation" and r.match_lines == (2, 3)
    assert "old_string matched lines 2-3 of the file only with the indentation shifted" in r.message
    assert r.to_dict()["match_lines"] == [2, 3]
    refused(ErrorCode.INVALID_ARGUMENT, coord.session, "g", match="fuzzy")


def test_flexible_coordinator_and_a_rebased_flexible_edit(root: Path) -> None:
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), match="flexible", policy="rebase") as c:
        (root / "a.py").write_text(SRC + "\ny = 0\n")
        a, b = c.session("a"), c.session("b")
        a.read("a.py")
        b.read("a.py")
        a.edit("a.py", "y = 0", "y = 1")
        r = b.edit("a.py", "x = 1\nreturn x\n", "x = 3\nreturn x\n")
        assert r.rebased and r.match == "indentation"
        assert (root / "a.py").read_text() == SRC.replace("x = 1   ", "x = 3") + "\ny = 1\n"
    with pytest.raises(CoordinatorError) as info:
        Coordinator(root, redis_client=fakeredis.FakeRedis(), match="loose")  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_placeholder_edits_and_writes_are_refused_by_default(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text(SRC)
    s = coord.session("s")
    s.read("a.py")
    err = refused(
        ErrorCode.PLACEHOLDER,
        s.edit,
        "a.py",
        "        x = 1   \n        return x\n",
        "        # ... rest of code ...\n",
    )
    assert "Write the full text" in err.message and err.message.startswith("new_string line 1")
    err = refused(ErrorCode.PLACEHOLDER, s.write, "a.py", "class A:\n    # existing code here\n")
    assert err.message.startswith("content line 2")
    assert (root / "a.py").read_text() == SRC  # nothing written
    s.multi_edit("a.py", [{"old_string": "class A:", "new_string": "class A:  # ..."}])  # a bare ellipsis: no marker
    # a marker-like comment that replaces no code goes through, and so does Python's Ellipsis
    s.edit("a.py", "        return x\n", "        return x\n        # rest of the methods here\n")
    assert "# rest of the methods here" in (root / "a.py").read_text()
    s.edit("a.py", "        x = 1   \n", "        x = ...\n")
    s.write("new.py", "# ... rest of code ...\n")  # a new file: there was no code to lose


def test_multi_edit_placeholder_is_named_by_its_index(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text(SRC)
    s = coord.session("s")
    s.read("a.py")
    err = refused(
        ErrorCode.PLACEHOLDER,
        s.multi_edit,
        "a.py",
        [
            {"old_string": "class A:", "new_string": "class B:"},
            {"old_string": "return x", "new_string": "# ... rest ..."},
        ],
    )
    assert err.message.startswith("edits[1].new_string line 1")


def test_placeholders_allow_writes_markers_literally(root: Path) -> None:
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), placeholders="allow") as c:
        (root / "a.py").write_text(SRC)
        s = c.session("s")
        s.read("a.py")
        s.edit("a.py", "        x = 1   \n        return x\n", "        # ... rest of code ...\n")
        assert "# ... rest of code ..." in (root / "a.py").read_text()


def test_empty_old_string_on_an_empty_file_says_it_filled_it(root: Path, coord: Coordinator) -> None:
    (root / "empty.txt").write_text("")
    s = coord.session("s")
    s.read("empty.txt")
    r = s.edit("empty.txt", "", "hello\n")
    assert not r.created and (root / "empty.txt").read_text() == "hello\n"
    assert r.message.startswith("The file empty.txt was empty and has been filled with new_string.")
    assert "replacement" not in r.message
    assert s.edit("new.txt", "", "x\n").message.startswith("Created new.txt.")


def test_missing_file_gets_no_did_you_mean_at_the_cut_off(root: Path, coord: Coordinator) -> None:
    (root / "snip.txt").write_text("x\n")
    err = refused(ErrorCode.FILE_NOT_FOUND, coord.session("s").read, "nope.txt")
    assert "Did you mean" not in err.message
    err = refused(ErrorCode.FILE_NOT_FOUND, coord.session("s").read, "snp.txt")
    assert "Did you mean snip.txt?" in err.message


def test_a_rebased_edit_next_to_a_change_names_it(root: Path) -> None:
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), policy="rebase") as c:
        (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 21)))
        a, b = c.session("a"), c.session("b")
        a.read("f.txt")
        b.read("f.txt")
        a.edit("f.txt", "line 10\n", "ten\n")
        r = b.edit("f.txt", "line 11\n", "eleven\n")  # the next line: commutes
        assert r.rebased and r.nearby_changes == ((10, 10),) and r.changed_lines == ((10, 10),)
        assert "Lines 10, right next to your edit, are among them" in r.message
        assert "ten\neleven\n" in (root / "f.txt").read_text()
