"""The per-file refusal tally of the service (coordinator.state.refusals), on fakeredis: counts by (code,
file), bounded however many files callers name, newest entries first."""

from __future__ import annotations

import fakeredis

from coordinator.state import refusals
from coordinator.state.refusals import FileRefusals


def test_counts_by_file_and_code_most_first() -> None:
    tally = FileRefusals(fakeredis.FakeRedis(), "ns")
    for code, path in [("stale", "a.py"), ("stale", "a.py"), ("not_read", "a.py"), ("stale", "dir/with space.md")]:
        tally.record(code, path, "s-1", "edit", when=1.0)
    got = tally.snapshot()
    assert got["by_file"][0] == {"path": "a.py", "code": "stale", "count": 2}
    assert {"path": "dir/with space.md", "code": "stale", "count": 1} in got["by_file"]
    assert got["by_code_here"] == {"stale": 3, "not_read": 1}
    assert [e["path"] for e in got["recent"]] == ["dir/with space.md", "a.py", "a.py", "a.py"]
    assert got["recent"][0] == {
        "time": 1.0,
        "session": "s-1",
        "operation": "edit",
        "code": "stale",
        "path": "dir/with space.md",
    }


def test_bounded_whatever_the_callers_name() -> None:
    r = fakeredis.FakeRedis()
    tally = FileRefusals(r, "ns")
    tally.record("stale", "kept.py", "s", "edit")
    tally.record("stale", "kept.py", "s", "edit")
    for n in range(refusals.MAX_FILE_CODES + 20):
        tally.record("file_not_found", f"missing-{n}.py", "s", "read")
    assert r.zcard(tally.by_file_key) == refusals.MAX_FILE_CODES
    assert r.llen(tally.recent_key) == refusals.MAX_RECENT
    assert tally.snapshot(files=1)["by_file"] == [{"path": "kept.py", "code": "stale", "count": 2}]
    assert 0 < r.ttl(tally.by_file_key) <= refusals.TTL_S


def test_keys_share_the_namespace_slot() -> None:
    tally = FileRefusals(fakeredis.FakeRedis(), "repo-1")
    assert tally.by_file_key.startswith("ec:{repo-1}:") and tally.recent_key.startswith("ec:{repo-1}:")
