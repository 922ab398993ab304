"""The `rebase` policy through the engine: carried-over edits, refusals naming who changed what, the view
that is not advanced over unseen changes, and strict staying the default."""

from __future__ import annotations

import multiprocessing as mp
import shutil
from pathlib import Path

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from tests.conftest import coordinator_for
from tests.refusals import refused


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


@pytest.fixture
def rcoord(root: Path, redis_url: str | None):  # type: ignore[no-untyped-def]
    c = coordinator_for(root, redis_url, policy="rebase")
    yield c
    c.close()


@pytest.mark.topology
def test_far_apart_edits_both_land_and_the_result_says_so(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(40))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    assert not a.edit("f.py", "line 3\n", "line three\n").rebased
    r = b.edit("f.py", "line 30\n", "line thirty\n")
    assert r.rebased and r.changed_lines == ((3, 3),)
    assert [(w["session"], w["version"]) for w in r.intervening] == [("A", 1)]
    assert "1 write by A" in r.message and "line 3" in r.message
    assert (root / "f.py").read_text() == numbered(40).replace("line 3\n", "line three\n").replace(
        "line 30\n", "line thirty\n"
    )
    assert r.to_dict()["rebased"] is True
    assert [e.session for e in rcoord.history("f.py")] == ["B", "A"]


def test_view_is_not_advanced_over_unseen_changes(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(40))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    a.edit("f.py", "line 3\n", "line three\n")
    b.edit("f.py", "line 30\n", "line thirty\n")
    # Over A's change: B has not seen it, so it is checked again and refused, naming A.
    err = refused(ErrorCode.STALE, b.edit, "f.py", "line 3\nline 4\n", "three\nfour\n")
    assert err.details["reason"] == "overlap" and err.details["clashing"] == [[3, 3]]
    assert "by: A (version 1, line 3)" in err.message
    # Next to it: the two commute, so it is carried over, and the result names the nearby change.
    r = b.edit("f.py", "line 4\n", "four\n")
    assert r.rebased and "line 3" in r.message
    # Next to B's own earlier edit: not a foreign change.
    r = b.edit("f.py", "line 31\n", "thirty-one\n")
    assert r.rebased and [w["session"] for w in r.intervening] == ["A"]
    assert not b.read("f.py").unchanged
    assert not b.edit("f.py", "line 5\n", "five\n").rebased  # after reading, plain again
    assert "line three\nfour\nfive\n" in (root / "f.py").read_text()


def test_strict_is_the_default_and_a_session_can_choose(root: Path, coord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(20))
    a, b, c = coord.session("A"), coord.session("B"), coord.session("C", policy="rebase")
    assert coord.policy == "strict" and b.policy == "strict" and c.policy == "rebase"
    for s in (a, b, c):
        s.read("f.py")
    a.edit("f.py", "line 1\n", "one\n")
    refused(ErrorCode.STALE, b.edit, "f.py", "line 15\n", "x\n")
    assert c.edit("f.py", "line 15\n", "fifteen\n").rebased
    with pytest.raises(CoordinatorError) as info:
        coord.session("D", policy="merge")  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_overlapping_edit_is_refused_and_nothing_is_written(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(10))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    a.edit("f.py", "line 5\n", "five\n")
    before = (root / "f.py").read_bytes()
    err = refused(ErrorCode.STALE, b.edit, "f.py", "line 5\n", "FIVE\n")
    assert err.details["reason"] == "invalid_on_base" or err.details["reason"] == "overlap"
    err = refused(ErrorCode.STALE, b.edit, "f.py", "line 4\nline 5\n", "four\nFIVE\n")
    assert err.details["reason"] == "overlap"
    assert (root / "f.py").read_bytes() == before
    assert len(rcoord.history("f.py")) == 1


def test_write_and_replace_all_are_never_rebased(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(10))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    a.edit("f.py", "line 1\n", "one\n")
    refused(ErrorCode.STALE, b.write, "f.py", "new\n")
    refused(ErrorCode.STALE, b.edit, "f.py", "line 9", "nine", True)


def test_multi_edit_is_rebased_all_or_nothing(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(30))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    a.edit("f.py", "line 15\n", "fifteen\n")
    r = b.multi_edit(
        "f.py", [{"old_string": "line 2\n", "new_string": "two\n"}, {"old_string": "line 28\n", "new_string": "x\n"}]
    )
    assert r.rebased and r.replacements == 2
    err = refused(
        ErrorCode.STALE,
        b.multi_edit,
        "f.py",
        [
            {"old_string": "line 3\n", "new_string": "three\n"},
            {"old_string": "line 15\nline 16\n", "new_string": "y\n"},
        ],
    )
    assert err.details["clashing"] == [[15, 15]]
    assert "three" not in (root / "f.py").read_text()


def test_crlf_file_stays_crlf_when_rebased(root: Path, rcoord: Coordinator) -> None:
    (root / "w.txt").write_bytes(numbered(12).replace("\n", "\r\n").encode())
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("w.txt")
    b.read("w.txt")
    a.edit("w.txt", "line 1\n", "one\n")
    assert b.edit("w.txt", "line 10\nline 11\n", "ten\neleven\n").rebased
    data = (root / "w.txt").read_bytes()
    assert b"one\r\n" in data and b"ten\r\neleven\r\n" in data and data.count(b"\n") == data.count(b"\r\n")


def test_lost_base_content_falls_back_to_stale(root: Path) -> None:
    """B's view lives in its process's memory and, once replaced by a write, in the history's objects. In
    another process, with the objects gone (retention), B's edit gets the strict answer: stale."""
    server = fakeredis.FakeServer()
    one = Coordinator(root, redis_client=fakeredis.FakeRedis(server=server), durability="none", policy="rebase")
    other = Coordinator(root, redis_client=fakeredis.FakeRedis(server=server), durability="none", policy="rebase")
    try:
        (root / "f.py").write_text(numbered(20))
        one.session("B").read("f.py")
        one.session("A").read("f.py")
        one.session("A").edit("f.py", "line 1\n", "one\n")
        # From the other process, B's view is found in the history (A's write kept it as its pre-image).
        assert other.session("B").edit("f.py", "line 15\n", "x\n").rebased
        one.session("A").edit("f.py", "line 3\n", "three\n")
        shutil.rmtree(other.history_store.packs)  # e.g. removed by retention
        other.history_store.packs.mkdir()
        # B's view is now its rebased view, which only `other` has in memory...
        assert other.session("B").edit("f.py", "line 17\n", "y\n").rebased
        one.session("A").edit("f.py", "line 5\n", "five\n")
        # ...and which a third process cannot find: refused, nothing written.
        third = Coordinator(root, redis_client=fakeredis.FakeRedis(server=server), durability="none", policy="rebase")
        before = (root / "f.py").read_bytes()
        err = refused(ErrorCode.STALE, third.session("B").edit, "f.py", "line 19\n", "z\n")
        assert "Read it again" in err.message
        assert (root / "f.py").read_bytes() == before
        third.close()
    finally:
        one.close()
        other.close()


def test_outside_change_far_away_is_rebased_too(root: Path, rcoord: Coordinator) -> None:
    """The base is kept at read time, so even a change by an outside program is diffed, not just refused."""
    (root / "f.py").write_text(numbered(20))
    b = rcoord.session("B")
    b.read("f.py")
    (root / "f.py").write_text(numbered(20).replace("line 2\n", "edited outside\n"))
    r = b.edit("f.py", "line 18\n", "x\n")
    assert r.rebased and r.intervening == () and r.changed_lines == ((2, 2),)
    assert "edited outside" in (root / "f.py").read_text()


# --- many processes: no lost update -------------------------------------------------------------------

ROUNDS = 12


def _own_line_worker(root: str, url: str, idx: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """Edit only this worker's own line, ROUNDS times; count acknowledged edits and refusals."""
    with Coordinator(root, url, durability="none", policy="rebase") as coord:
        s = coord.session(f"w{idx}")
        acked = refused = 0
        value = 0
        s.read("hot.txt")
        while acked < ROUNDS:
            try:
                s.edit("hot.txt", f"w{idx}={value}\n", f"w{idx}={value + 1}\n")
                value += 1
                acked += 1
            except CoordinatorError as exc:
                assert exc.code == ErrorCode.STALE, exc
                refused += 1
                s.read("hot.txt")
        out.put((idx, acked, refused))


@pytest.mark.slow
def test_processes_editing_their_own_lines_lose_nothing(real_redis_root: Path) -> None:
    from coordinator.state.embedded import ensure_embedded_redis

    n = 4
    # Every worker's line has a spacer line above and below: own lines never touch.
    (real_redis_root / "hot.txt").write_text("".join(f"# {i}\nw{i}=0\n" for i in range(n)) + "# end\n")
    url = ensure_embedded_redis(real_redis_root / ".edit-coordinator")
    ctx = mp.get_context("forkserver")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_own_line_worker, args=(str(real_redis_root), url, i, out)) for i in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    text = (real_redis_root / "hot.txt").read_text()
    for idx, acked, _ in results:
        assert acked == ROUNDS and f"w{idx}={ROUNDS}\n" in text
    assert sum(r for _, _, r in results) == 0  # own lines never conflict under rebase


def test_a_change_already_made_by_another_session_is_answered_as_made(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(20))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    a.edit("f.py", "line 4\nline 5\nline 6\n", "line 4\nfive\nline 6\n")
    a.edit("f.py", "line 15\n", "fifteen\n")
    after_a = (root / "f.py").read_bytes()
    r = b.edit("f.py", "line 5\n", "five\n")  # the same change, other context: already made
    assert r.already_made and r.replacements == 0 and r.rebased
    assert "already in f.py" in r.message and "A" in r.message and "Nothing was written" in r.message
    assert (root / "f.py").read_bytes() == after_a
    assert [e.session for e in rcoord.history("f.py")] == ["A", "A"]  # nothing written, nothing in history
    # B's view is what it read plus its own edit: its next edit is carried over from there
    r = b.edit("f.py", "five\nline 6\nline 7\n", "five\nline 6\nseven\n")
    assert r.rebased and not r.already_made
    expected = numbered(20).replace("line 5\n", "five\n").replace("line 7\n", "seven\n")
    assert (root / "f.py").read_text() == expected.replace("line 15\n", "fifteen\n")


def test_insertions_at_one_point_land_in_a_recorded_order_and_undo(root: Path, rcoord: Coordinator) -> None:
    (root / "f.py").write_text(numbered(10))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    a.edit("f.py", "line 4\nline 5\nline 6\n", "line 4\nline 5\nA1\nA2\nline 6\n")
    r = b.edit("f.py", "line 5\nline 6\nline 7\n", "line 5\nB1\nline 6\nline 7\n")
    assert r.rebased and r.placed_after == ((6, 7),) and r.placed_before == ()
    assert "put after them" in r.message
    assert "line 5\nA1\nA2\nB1\nline 6\n" in (root / "f.py").read_text()
    assert [e.session for e in rcoord.history("f.py")] == ["B", "A"]  # the order of the writes
    b.read("f.py")
    b.undo("f.py")  # B's insertion is taken out again; A's stays
    assert (root / "f.py").read_text() == numbered(10).replace("line 5\n", "line 5\nA1\nA2\n")
    # anchored above only: B's lines go right after its anchor, before A's, and the result says so
    b.read("f.py")
    c = rcoord.session("C")
    c.read("f.py")
    b.edit("f.py", "line 8\n", "line 8\nB8\n")
    r = c.edit("f.py", "line 8\n", "line 8\nC8\n")
    assert r.placed_before == ((12, 12),) and "put before them" in r.message  # B8, after C8 now
    assert "line 8\nC8\nB8\nline 9\n" in (root / "f.py").read_text()


def test_a_change_a_session_already_made_itself_is_refused_not_answered_as_made(
    root: Path, rcoord: Coordinator
) -> None:
    """Two calls of one session racing (two coroutines incrementing one line, each from the version it
    read): the second makes the very change the first made. Answering it "already made" would swallow an
    increment, so it is refused as stale, and nothing is written."""
    (root / "f.py").write_text(numbered(20))
    a, b = rcoord.session("A"), rcoord.session("B")
    a.read("f.py")
    b.read("f.py")
    first_view = rcoord.state.get("A", "f.py")
    a.edit("f.py", "line 5\n", "five\n")
    b.edit("f.py", "line 15\n", "fifteen\n")  # another session's write: the file moves on
    # the other call's view is the version read before the first call's edit (its read was recorded last)
    assert first_view is not None
    rcoord.state.record_read("A", "f.py", first_view)
    rcoord._access.views.drop("A", "f.py")
    before = (root / "f.py").read_bytes()
    err = refused(ErrorCode.STALE, a.edit, "f.py", "line 5\n", "five\n")
    assert err.details["reason"] == "made_by_this_session" and "(A)" in err.message
    assert (root / "f.py").read_bytes() == before
    # the same change made by another session is answered as made, even after writes of the session's own
    c = rcoord.session("C")
    rcoord.state.record_read("C", "f.py", first_view)
    assert c.edit("f.py", "line 18\n", "eighteen\n").rebased  # C's own write since its read
    before = (root / "f.py").read_bytes()
    r = c.edit("f.py", "line 5\n", "five\n")
    assert r.already_made and "made by A" in r.message
    assert (root / "f.py").read_bytes() == before
