"""The oracle's history audit (`check_history`): after a run, every listed version reached the file and each
file's newest version undoes and redoes. The fault runs (test_faults.py) apply it after kill -9s; here it is
shown to pass a real history and to catch a broken chain and an undo that gives other bytes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from coordinator import Coordinator, CoordinatorError, ErrorCode
from tests.worker import test_fleet as fleet_tests
from worker.agent import content_hash
from worker.oracle import OracleReport, _check_chain, _check_undo, check_history

redis_root = fleet_tests.redis_root
_fork_server = fleet_tests._fork_server


def _entry(version: int, before: bytes | None, after: bytes | None) -> SimpleNamespace:
    h = lambda b: None if b is None else content_hash(b)  # noqa: E731
    return SimpleNamespace(version=version, before=h(before), after=h(after))


def test_a_real_history_passes_and_the_files_are_left_as_they_were(redis_root: Path) -> None:
    with Coordinator(redis_root) as coord:
        s = coord.session("s1")
        s.write("a.txt", "a = 0\n")
        for i in range(1, 4):
            s.edit("a.txt", f"a = {i - 1}", f"a = {i}")
        coord.session("s2").write("b.txt", "b\n")
    rep = OracleReport()
    check_history(rep, str(redis_root), ["a.txt", "b.txt"], None)
    assert rep.ok, rep.details
    assert (rep.history_entries, rep.history_unreal, rep.undo_checked, rep.undo_failed) == (5, 0, 2, 0)
    assert (redis_root / "a.txt").read_text() == "a = 3\n"  # undone, then redone
    assert (redis_root / "b.txt").read_text() == "b\n"


def test_a_version_the_file_never_held_breaks_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"v3")
    rep = OracleReport()
    # newest first; version 2's result (b"lost") is not what version 3 started from (b"v2").
    _check_chain(rep, "f.txt", [_entry(3, b"v2", b"v3"), _entry(2, b"v1", b"lost"), _entry(1, None, b"v1")], path)
    assert rep.history_unreal == 1 and not rep.ok
    assert "version 2" in rep.details[0]
    clean = OracleReport()
    _check_chain(clean, "f.txt", [_entry(3, b"v2", b"v3"), _entry(2, b"v1", b"v2"), _entry(1, None, b"v1")], path)
    assert clean.history_unreal == 0 and clean.ok


class _Session:
    def __init__(self, undo: Any) -> None:
        self._undo = undo

    def read(self, rel: str) -> None:
        return None

    def undo(self, rel: str, version: int) -> None:
        self._undo()

    def redo(self, rel: str) -> None:
        return None


def test_an_undo_that_leaves_other_bytes_or_is_refused_fails(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"v2")
    newest = _entry(2, b"v1", b"v2")
    rep = OracleReport()
    _check_undo(rep, _Session(lambda: None), "f.txt", newest, path)  # the undo did not change the file
    assert (rep.undo_checked, rep.undo_failed) == (1, 1) and not rep.ok

    def refuse() -> None:
        raise CoordinatorError(ErrorCode.STALE, "changed since read")

    refused = OracleReport()
    _check_undo(refused, _Session(refuse), "f.txt", newest, path)
    assert refused.undo_failed == 1 and "stale" in refused.details[0]
