"""The check-then-write's public surface: its types, the busy-lock hook, the argument
rules (single process; fakeredis unless a real server is needed)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode, arguments
from coordinator.disk.locks import LockManager
from coordinator.engine import CallOptions, CheckedWrite, CurrentFile, Edits, LockBusy, WritePlan, WriteResult
from coordinator.history import content_hash
from coordinator.text import semantics


def _other_holder(coord: Coordinator) -> LockManager:
    """A second lock manager on the same lock files: another process, as far as flock is concerned."""
    return LockManager(coord.state_dir / "locks")


# ------------------------------------------------------------------------------------ public check_then_write
def test_check_then_write_takes_public_types_and_sees_the_bytes_on_disk(coord: Coordinator, root: Path) -> None:
    (root / "log.txt").write_text("one\n")
    s = coord.session("s")
    s.read("log.txt")
    seen: list[CurrentFile] = []

    def append(cur: CurrentFile) -> WritePlan:
        seen.append(cur)
        text = cur.decoded().text + "two\n"
        return WritePlan(new_data=text.encode(), new_text=text, first_offset=4, inserted_len=4)

    res = coord.check_then_write(CheckedWrite("s", "log.txt", "append", append))
    assert (root / "log.txt").read_text() == "one\ntwo\n"
    assert seen[0].exists and seen[0].data == b"one\n" and seen[0].digest == content_hash(b"one\n")
    assert res.operation == "append" and res.start_line == 2 and res.hash == content_hash(b"one\ntwo\n")
    assert coord.history("log.txt")[0].operation == "append"


def test_check_then_write_refuses_a_stale_view_before_the_transform_runs(coord: Coordinator, root: Path) -> None:
    (root / "f.txt").write_text("a\n")
    coord.session("s").read("f.txt")
    (root / "f.txt").write_text("changed outside\n")
    called = []

    def transform(cur: CurrentFile) -> WritePlan:
        called.append(cur)
        return WritePlan(new_data=b"x\n")

    with pytest.raises(CoordinatorError) as ei:
        coord.check_then_write(CheckedWrite("s", "f.txt", "custom", transform))
    assert ei.value.code == ErrorCode.STALE and not called
    assert (root / "f.txt").read_text() == "changed outside\n"


def test_finish_shapes_the_returned_result(coord: Coordinator, root: Path) -> None:
    from dataclasses import replace

    def create(cur: CurrentFile) -> WritePlan:
        return WritePlan(new_data=b"new\n", new_text="new\n")

    res = coord.check_then_write(
        CheckedWrite(
            "s", "n.txt", "write", create, may_create=True, finish=lambda r: replace(r, message=f"v{r.version}")
        )
    )
    assert res.message == "v1" and res.created


def test_an_edits_change_is_the_transform_and_what_a_rebase_carries_over(coord: Coordinator, root: Path) -> None:
    """The edit is described once: the same `Edits` value makes the plan on a current view and is carried
    over onto a changed file under policy "rebase"; a custom transform under "rebase" is judged strictly."""
    lines = [f"line {i}\n" for i in range(1, 21)]
    (root / "f.txt").write_text("".join(lines))
    coord.session("s").read("f.txt")
    edit = Edits([semantics.EditSpec("line 18\n", "LINE 18\n")])
    res = coord.check_then_write(CheckedWrite("s", "f.txt", "edit", edit, policy="rebase"))
    assert not res.rebased and "LINE 18\n" in (root / "f.txt").read_text()
    coord.session("other").read("f.txt")
    coord.session("other").edit("f.txt", "line 2\n", "LINE 2\n")  # far from line 19: a rebase carries over
    second = Edits([semantics.EditSpec("line 19\n", "LINE 19\n")])
    with pytest.raises(CoordinatorError) as strict:
        coord.check_then_write(CheckedWrite("s", "f.txt", "edit", second))
    assert strict.value.code == ErrorCode.STALE

    def same_as_edits(cur: CurrentFile) -> WritePlan:
        return second(cur)

    with pytest.raises(CoordinatorError) as custom:
        coord.check_then_write(CheckedWrite("s", "f.txt", "edit", same_as_edits, policy="rebase"))
    assert custom.value.code == ErrorCode.STALE
    res = coord.check_then_write(CheckedWrite("s", "f.txt", "edit", second, policy="rebase"))
    text = (root / "f.txt").read_text()
    assert res.rebased and "LINE 2\n" in text and "LINE 18\n" in text and "LINE 19\n" in text


def test_check_then_write_checks_the_request_s_session_and_policy(coord: Coordinator) -> None:
    for bad in (CheckedWrite("", "f.txt", "w", Edits([])), CheckedWrite("s", "f.txt", "w", Edits([]), policy="x")):  # type: ignore[arg-type]
        with pytest.raises(CoordinatorError) as ei:
            coord.check_then_write(bad)
        assert ei.value.code == ErrorCode.INVALID_ARGUMENT


# ------------------------------------------------------------------------------------------- busy lock hook
def test_busy_lock_raises_lock_busy_and_resume_finishes_the_same_call(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "f.txt").write_text("x = 1\n")
    s = coord.session("s")
    s.read("f.txt")
    pre_lock_calls = []
    real_pre_lock = coord.writer._pre_lock

    def counting_pre_lock(*a: Any, **kw: Any) -> Any:
        pre_lock_calls.append(a)
        return real_pre_lock(*a, **kw)

    monkeypatch.setattr(coord.writer, "_pre_lock", counting_pre_lock)
    other = _other_holder(coord)
    held = other.acquire("f.txt")
    with pytest.raises(LockBusy) as ei:
        s.with_options(CallOptions(wait_for_lock=False)).edit("f.txt", "x = 1", "x = 2")
    assert (root / "f.txt").read_text() == "x = 1\n"  # nothing written while busy
    assert len(pre_lock_calls) == 1
    out: list[WriteResult] = []
    waiter = threading.Thread(target=lambda: out.append(ei.value.resume()))
    waiter.start()  # it waits for the lock (whichever comes first, the outcome is the same)
    held.release()
    waiter.join(timeout=30)
    other.close()
    assert out, "resume returned"
    res = out[0]
    assert (root / "f.txt").read_text() == "x = 2\n"
    assert len(pre_lock_calls) == 1, "the step before the lock is not repeated"
    assert res.replacements == 1 and "has been updated" in res.message and "Snippet" in res.message
    s.edit("f.txt", "x = 2", "x = 3")  # the session's view was recorded by the resumed call
    assert (root / "f.txt").read_text() == "x = 3\n"


def test_free_lock_with_no_wait_runs_inline(coord: Coordinator, root: Path) -> None:
    (root / "f.txt").write_text("a\n")
    s = coord.session("s")
    s.read("f.txt")
    res = s.with_options(CallOptions(wait_for_lock=False)).edit("f.txt", "a", "b")
    assert res.version == 1 and (root / "f.txt").read_text() == "b\n"


def test_resumed_call_still_judges_the_view_under_the_lock(coord: Coordinator, root: Path) -> None:
    """The view check is made when the lock is finally had: a write made meanwhile makes the resumed
    edit stale, and nothing is lost."""
    (root / "f.txt").write_text("a\nb\n")
    s, t = coord.session("s"), coord.session("t")
    s.read("f.txt")
    t.read("f.txt")
    other = _other_holder(coord)
    held = other.acquire("f.txt")
    with pytest.raises(LockBusy) as ei:
        s.with_options(CallOptions(wait_for_lock=False)).edit("f.txt", "a", "A")
    held.release()
    other.close()
    t.edit("f.txt", "b", "B")  # lands first
    with pytest.raises(CoordinatorError) as refused:
        ei.value.resume()
    assert refused.value.code == ErrorCode.STALE
    assert (root / "f.txt").read_text() == "a\nB\n"


def test_options_belong_to_the_session_view_not_the_thread(coord: Coordinator, root: Path) -> None:
    (root / "f.txt").write_text("a\n")
    s = coord.session("s")
    s.read("f.txt")
    nowait = s.with_options(CallOptions(wait_for_lock=False))
    other = _other_holder(coord)
    held = other.acquire("f.txt")
    outcome: list[object] = []

    def elsewhere() -> None:  # another thread, the session without the options: it waits
        outcome.append(s.edit("f.txt", "a", "b"))

    worker = threading.Thread(target=elsewhere)
    worker.start()
    with pytest.raises(LockBusy):  # the view, on this thread meanwhile, does not wait
        nowait.edit("f.txt", "a", "b")
    held.release()
    worker.join(timeout=30)
    other.close()
    assert isinstance(outcome[0], WriteResult) and (root / "f.txt").read_text() == "b\n"
    assert s.options.wait_for_lock and not nowait.options.wait_for_lock  # the session kept its own


# ------------------------------------------------------------------------------- nothing after the rename fails
@pytest.mark.parametrize("step", ["record_write", "start_record_write", "the replies"])
def test_an_unexpected_error_after_the_rename_is_a_warning_not_a_failure(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Whichever way the record goes (waited for, or sent before the result is made and its replies read
    after), a failure in it leaves the write standing, with a warning."""
    (root / "f.txt").write_text("a\n")
    s = coord.session("s")
    s.read("f.txt")

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("not a Redis error at all")  # e.g. a cluster client's own exception type

    if step == "the replies":
        start = coord.state.start_record_write

        def started(*a: Any, **kw: Any) -> Any:
            finish = start(*a, **kw)

            def finish_then_fail() -> None:
                finish()
                broken()

            return finish_then_fail

        monkeypatch.setattr(coord.state, "start_record_write", started)
    else:
        monkeypatch.setattr(coord.state, step, broken)
    if step == "record_write":  # the waited-for way (as with a post-write hook, notices or a lease refresh)
        monkeypatch.setattr(coord.writer.recorder, "_start_record", lambda *a, **kw: None)
    res = s.edit("f.txt", "a", "b")
    assert (root / "f.txt").read_text() == "b\n"
    assert res.version == 1 and res.warnings and "written" in res.warnings[0]


def test_a_failure_while_building_the_result_still_reports_the_write(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coordinator.text import semantics

    (root / "f.txt").write_text("a\n")
    s = coord.session("s")
    s.read("f.txt")

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(semantics, "render_snippet_at", broken)
    res = s.edit("f.txt", "a", "b")
    assert (root / "f.txt").read_text() == "b\n"
    assert res.version == 1 and res.warnings and "has been updated" in res.message
    # The record had been sent before the result was made: its replies were read all the same, and the
    # connection it went on is free for the next write (no call is left holding it).
    lane = coord.state._lane
    assert lane is None or not lane._lock.locked()
    monkeypatch.undo()
    assert s.read("f.txt").content == "b\n" and s.edit("f.txt", "b", "c").version == 2
    assert coord.state.meta("f.txt")["version"] == "2"


# ----------------------------------------------------------------------------------------- argument rules
def test_argument_rules_are_one_module_the_engine_uses(coord: Coordinator, root: Path) -> None:
    assert arguments.is_session_id("agent-7") and not arguments.is_session_id("bad id")
    assert arguments.opt_int(10.0, "limit", 1, lenient=True) == 10
    for bad in (lambda: arguments.opt_int(10.0, "limit", 1), lambda: arguments.check_text("a\x00", "content", 9)):
        with pytest.raises(CoordinatorError) as ei:
            bad()
        assert ei.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(CoordinatorError) as ei:
        arguments.check_edit_pair("same", "same", False, 100)
    assert ei.value.code == ErrorCode.NO_CHANGE
    specs = arguments.check_edits([{"old_string": "a", "new_string": "b"}], 100)
    assert specs[0].old_string == "a" and not specs[0].replace_all
    # the engine answers with the very same rule and message
    (root / "f.txt").write_text("a\n")
    s = coord.session("s")
    s.read("f.txt")
    with pytest.raises(CoordinatorError) as engine_err:
        s.multi_edit("f.txt", [{"old_string": "a"}])
    with pytest.raises(CoordinatorError) as rule_err:
        arguments.check_edits([{"old_string": "a"}], 100)
    assert engine_err.value.message == rule_err.value.message


def test_a_resumed_call_keeps_the_options_it_started_with(coord: Coordinator, root: Path) -> None:
    """The call resumed on another thread is the call that started: its result, recorded once."""
    (root / "f.txt").write_text("a\n")
    s = coord.session("s")
    s.read("f.txt")
    other = _other_holder(coord)
    held = other.acquire("f.txt")
    with pytest.raises(LockBusy) as ei:
        s.with_options(CallOptions(wait_for_lock=False)).edit("f.txt", "a", "b")
    held.release()
    other.close()
    out: list[WriteResult] = []
    worker = threading.Thread(target=lambda: out.append(ei.value.resume()))
    worker.start()
    worker.join(timeout=30)
    assert out and out[0].version == 1 and (root / "f.txt").read_text() == "b\n"
    assert [e.version for e in coord.history("f.txt")] == [1]


def test_a_resumed_call_never_raises_lock_busy_again(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed call whose cached view is refused and tried again with the view in Redis waits for the
    lock on that retry: whoever resumed it has no second resume to run (the HTTP service and AsyncClient
    resume on a worker thread)."""
    (root / "f.txt").write_text("a\nb\n")
    s = coord.session("s")
    s.read("f.txt")  # this process caches s's view
    same = Coordinator(root, redis_client=coord.redis, durability="none")  # s in another process
    try:
        same.session("t").read("f.txt")
        same.session("t").edit("f.txt", "b", "B")
        same.session("s").read("f.txt")  # s's view in Redis is now the current file; the cache is older
    finally:
        same.close()
    other = _other_holder(coord)
    held = other.acquire("f.txt")
    with pytest.raises(LockBusy) as ei:
        s.with_options(CallOptions(wait_for_lock=False)).edit("f.txt", "a", "A")
    held.release()
    other.close()
    monkeypatch.setattr(coord.locks, "try_acquire", lambda key: None)  # from now on the lock looks busy
    res = ei.value.resume()
    assert res.version == 2 and (root / "f.txt").read_text() == "A\nB\n"


def test_evolve_copies_a_result_with_the_changes_and_refuses_unknown_fields() -> None:
    from coordinator.engine.results import WriteResult, evolve

    res = WriteResult(path="a.txt", operation="edit", created=False, version=3, hash="h", message="m", warnings=("w",))
    new = evolve(res, message="n", notice="x")
    assert new == WriteResult(
        path="a.txt", operation="edit", created=False, version=3, hash="h", message="n", warnings=("w",), notice="x"
    )
    assert res.message == "m" and res.notice == ""  # the original is untouched
    with pytest.raises(TypeError, match="no field 'mesage'"):
        evolve(res, mesage="typo")
