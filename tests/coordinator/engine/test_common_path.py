"""The common path (`CheckThenWrite._common_write`, engine/write.py) gives what the general path gives: the
same results, files, history and refusals, call by call; and it hands every call that is not the common
case over with nothing written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.engine import CallOptions, LockBusy, Session, WriteResult, leasing
from coordinator.engine import write as write_mod
from tests.refusals import refused

Call = Callable[[Session, str], Any]


class _Spy:
    """Counts the calls the hot path finished itself (`taken`), refused (`raised`) and handed over (`handed`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, enabled: bool = True) -> None:
        self.taken = self.handed = self.raised = 0
        real = write_mod.CheckThenWrite._common_write

        def spy(eng: Any, req: Any) -> WriteResult | None:
            try:
                done = real(eng, req) if enabled else None
            except CoordinatorError:
                self.raised += 1
                raise
            if done is None:
                self.handed += 1
            else:
                self.taken += 1
            return done

        monkeypatch.setattr(write_mod.CheckThenWrite, "_common_write", spy)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Coordinator, Coordinator]]:
    """Two coordinators on two identical roots, each with its own fake Redis."""
    made = []
    for name in ("hot", "general"):
        root = tmp_path / name
        root.mkdir()
        made.append(Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none"))
    yield made[0], made[1]
    for c in made:
        c.close()


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def _refusals(coord: Coordinator) -> dict[str, int]:
    """Refusals counted by code: flushed to Redis already, or still waiting in this process."""
    counts = dict(coord.state.error_counts())
    for code, n in coord._access.refusals._counts.items():
        counts[code] = counts.get(code, 0) + n
    return counts


def _outcome(call: Call, coord: Coordinator) -> tuple[str, Any]:
    s = coord.session("s")
    try:
        res = call(s, "f.txt")
    except CoordinatorError as exc:
        return "refused", (exc.code, exc.message, exc.details)
    d = res.to_dict()
    d.pop("timings")
    return "done", d


def _run_both(
    pair: tuple[Coordinator, Coordinator],
    monkeypatch: pytest.MonkeyPatch,
    content: bytes,
    call: Call,
    setup: Callable[[Coordinator], None] | None = None,
) -> tuple[tuple[str, Any], _Spy]:
    """`call` by session s on f.txt (holding `content`, read by s, then `setup`) on both coordinators, the
    general one with the hot path off: both give the same answer, file, history and refusal counts."""
    hot, general = pair
    outcomes, spies = [], []
    for coord, enabled in ((hot, True), (general, False)):
        (Path(coord.root) / "f.txt").write_bytes(content)
        coord.session("s").read("f.txt")
        if setup is not None:
            setup(coord)
        with monkeypatch.context() as m:
            spy = _Spy(m, enabled)
            outcomes.append(_outcome(call, coord))
            spies.append(spy)
    assert outcomes[0] == outcomes[1]
    assert _bytes(Path(hot.root) / "f.txt") == _bytes(Path(general.root) / "f.txt")
    strip = [
        [(e.version, e.operation, e.before, e.after, e.first_line, e.last_line) for e in c.history("f.txt")]
        for c in pair
    ]
    assert strip[0] == strip[1]
    assert _refusals(hot) == _refusals(general)
    return outcomes[0], spies[0]


TEXT = b"def f():\n    return 'a'\n\nx = 1\nx = 1\n"

TAKEN: dict[str, tuple[bytes, Call]] = {
    "edit": (TEXT, lambda s, p: s.edit(p, "return 'a'", "return 'b'")),
    "curly quotes kept": (
        "say \u2018hi\u2019\n".encode(),
        lambda s, p: s.edit(p, "say 'hi'", "say 'bye'"),
    ),
    "replace_all": (TEXT, lambda s, p: s.edit(p, "x = 1", "x = 2", replace_all=True)),
    "crlf kept": (b"one\r\ntwo\r\n", lambda s, p: s.edit(p, "one\ntwo", "uno\ndos")),
    "utf-16": ("caf\u00e9\n".encode("utf-16"), lambda s, p: s.edit(p, "caf\u00e9", "tea")),
    "multi_edit": (
        TEXT,
        lambda s, p: s.multi_edit(
            p, [{"old_string": "'a'", "new_string": "'c'"}, {"old_string": "def", "new_string": "async def"}]
        ),
    ),
    "write": (TEXT, lambda s, p: s.write(p, "new\n")),
    "no match": (TEXT, lambda s, p: s.edit(p, "nowhere", "x")),
    "ambiguous": (TEXT, lambda s, p: s.edit(p, "x = 1", "x = 2")),
}


@pytest.mark.parametrize("case", sorted(TAKEN))
def test_the_hot_path_gives_what_the_general_path_gives(
    case: str, pair: tuple[Coordinator, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No lease is granted in these cases, so the lease snapshot may be kept for the whole test: which path
    # takes a call must not depend on how long a loaded machine took between the read and the edit (a
    # snapshot older than LEASE_SNAPSHOT_S, 0.2 s, sends the call the general way).
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 3600.0)
    content, call = TAKEN[case]
    (kind, _), spy = _run_both(pair, monkeypatch, content, call)
    if kind == "done":
        assert (spy.taken, spy.handed, spy.raised) == (1, 0, 0), "a plain write on a held view is the hot path's"
    else:
        assert (spy.taken, spy.handed, spy.raised) == (0, 0, 1), "a refusal of the transform is the hot path's"


def _written_by_other(coord: Coordinator) -> None:
    coord.session("other").read("f.txt")
    coord.session("other").edit("f.txt", "x = 1\nx = 1", "x = 1\nx = 3")


def _leased_by_other(coord: Coordinator) -> None:
    coord.session("other").lease("g.txt")


HANDED: dict[str, tuple[Callable[[Coordinator], None], Call]] = {
    "stale view": (_written_by_other, lambda s, p: s.edit(p, "return 'a'", "return 'b'")),
    "a lease in force": (_leased_by_other, lambda s, p: s.edit(p, "return 'a'", "return 'b'")),
    "missing file": (lambda c: (Path(c.root) / "f.txt").unlink(), lambda s, p: s.edit(p, "a", "b")),
    "no view held here": (lambda c: c._access.views.clear(), lambda s, p: s.edit(p, "return 'a'", "return 'b'")),
}


@pytest.mark.parametrize("case", sorted(HANDED))
def test_what_is_not_the_common_case_is_handed_over_before_anything_is_written(
    case: str, pair: tuple[Coordinator, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    setup, call = HANDED[case]
    _, spy = _run_both(pair, monkeypatch, TEXT, call, setup)
    assert (spy.taken, spy.handed, spy.raised) == (0, 1, 0)


def test_a_stale_view_is_refused_once_through_the_hand_over(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "f.txt").write_bytes(TEXT)
    coord.session("s").read("f.txt")
    _written_by_other(coord)
    spy = _Spy(monkeypatch)
    err = refused(ErrorCode.STALE, coord.session("s").edit, "f.txt", "return 'a'", "return 'b'")
    assert "last written by session other" in err.message
    assert spy.handed == 1 and spy.taken == 0
    assert _refusals(coord) == {"stale": 1}
    assert (root / "f.txt").read_bytes() == TEXT.replace(b"x = 1\nx = 1", b"x = 1\nx = 3")


def _with_options(call: Call, wait_for_lock: bool) -> Call:
    def run(s: Session, p: str) -> Any:
        return call(s.with_options(CallOptions(wait_for_lock=wait_for_lock)), p)

    return run


@pytest.mark.parametrize("wait_for_lock", [True, False])
def test_a_sessions_call_options_take_the_hot_path_too(
    wait_for_lock: bool, pair: tuple[Coordinator, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP service's calls (not waiting for the lock) take the hot path when the lock is free."""
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 3600.0)  # no lease here: see the test above

    def call(s: Session, p: str) -> Any:
        return _with_options(lambda s, p: s.edit(p, "return 'a'", "return 'b'"), wait_for_lock)(s, p)

    (kind, done), spy = _run_both(pair, monkeypatch, TEXT, call)
    assert kind == "done" and (spy.taken, spy.handed, spy.raised) == (1, 0, 0)
    for coord in pair:
        assert coord.history("f.txt")[0].after == done["hash"]  # recorded by the hot path


def test_a_busy_lock_not_waited_for_is_handed_over_to_lock_busy(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 3600.0)  # no lease here: see the first test above
    (root / "f.txt").write_bytes(TEXT)
    coord.session("s").read("f.txt")
    spy = _Spy(monkeypatch)
    held = coord.locks.try_acquire("f.txt")
    assert held is not None
    with pytest.raises(LockBusy) as busy:
        coord.session("s", options=CallOptions(wait_for_lock=False)).edit("f.txt", "return 'a'", "return 'b'")
    assert (spy.taken, spy.handed) == (0, 1)
    assert (root / "f.txt").read_bytes() == TEXT  # nothing written while the lock is someone else's
    held.release()
    assert busy.value.resume().version == 1
    assert (root / "f.txt").read_bytes() == TEXT.replace(b"'a'", b"'b'")
    coord.session("s").edit("f.txt", "return 'b'", "return 'c'")
    assert spy.taken == 1


def test_a_path_found_stale_lately_goes_to_the_general_path_with_one_lock(
    coord: Coordinator, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "f.txt").write_bytes(TEXT)
    s = coord.session("s")
    s.read("f.txt")
    _written_by_other(coord)
    refused(ErrorCode.STALE, s.edit, "f.txt", "return 'a'", "return 'b'")
    s.read("f.txt")
    spy = _Spy(monkeypatch)
    taken: list[str] = []
    acquire = coord.locks.acquire
    monkeypatch.setattr(coord.locks, "acquire", lambda key, *a: taken.append(key) or acquire(key, *a))
    s.edit("f.txt", "return 'a'", "return 'b'")
    assert (spy.taken, spy.handed) == (0, 1) and taken == ["f.txt"]
