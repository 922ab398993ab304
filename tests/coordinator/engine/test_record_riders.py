"""What rides a write's record (engine/record.py): the lease snapshot's refresh goes out on the early,
packed record (`Recorder._start_record`), not on redis-py's pipeline (`Recorder._record`), and its reply
refreshes the snapshot, so a steady stream of edits keeps the snapshot fresh without a round trip of its
own and without the pipeline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.engine import leasing
from coordinator.engine.leasing import LeaseGate
from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis
from coordinator.state.views import StateStore

SNAPSHOT_S = 0.4
PAUSE_S = 0.22  # past half the snapshot's age (the rider is due at every edit), well before its end


@pytest.fixture(params=["embedded", "fake"])
def coord(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Coordinator]:
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", SNAPSHOT_S)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f.txt").write_text("".join(f"line {i} = 0\n" for i in range(20)))
    if request.param == "embedded":  # the lane, its replies read raw from hiredis
        state = root / ".edit-coordinator"
        url = ensure_embedded_redis(state)
        try:
            with Coordinator(root, url, durability="none") as c:
                yield c
        finally:
            stop_embedded_redis(state)
    else:  # another connection class: its replies through its own read_response
        with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
            yield c


class _Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n: dict[str, int] = {}
        for owner, name in (
            (StateStore, "record_write"),
            (StateStore, "start_record_write"),
            (StateStore, "get_with"),
            (LeaseGate, "fetch"),
            (LeaseGate, "take"),
        ):
            self._count(monkeypatch, owner, name)

    def _count(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        real = getattr(owner, name)
        self.n[name] = 0

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.n[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


def test_a_steady_stream_of_edits_refreshes_the_snapshot_on_the_early_record(
    coord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = coord.session("s")
    s.read("f.txt")
    counts = _Counts(monkeypatch)
    edits = 6
    for i in range(edits):
        time.sleep(PAUSE_S)
        snap = coord.lease_gate._snapshot
        assert snap is not None and time.monotonic() - snap[0] > SNAPSHOT_S / 2  # the rider is due
        res = s.edit("f.txt", f"line {i} = 0\n", f"line {i} = 1\n")
        assert not res.warnings
        after = coord.lease_gate._snapshot
        assert after is not None and after[0] > snap[0]  # refreshed by this edit's record
    assert counts.n["record_write"] == 0  # never redis-py's pipeline
    assert counts.n["start_record_write"] == edits
    assert counts.n["take"] == edits  # one refresh per edit, from the record's reply
    assert counts.n["fetch"] == counts.n["get_with"] == 0  # the snapshot never went stale: no round trip of its own
    assert coord.state.meta("f.txt")["version"] == str(edits)


def test_a_lease_granted_elsewhere_is_seen_through_the_refresh_that_rode_a_record(
    coord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = coord.session("s")
    s.read("f.txt")
    s.edit("f.txt", "line 0 = 0\n", "line 0 = 1\n")
    # Another process grants a lease (straight into Redis: this process's snapshot knows nothing of it).
    granted = coord.lease_store.grant("other", ["f.txt"], "exclusive", 60.0)
    counts = _Counts(monkeypatch)
    time.sleep(PAUSE_S)
    s.edit("f.txt", "line 1 = 0\n", "line 1 = 1\n")  # within the grant's wait: the old snapshot still serves
    assert counts.n["record_write"] == 0 and counts.n["take"] == 1
    fresh = coord.lease_gate.fresh()
    assert fresh is not None and [x.id for x in fresh] == [granted[0].id]
    assert fresh[0].session == "other" and fresh[0].pattern == "f.txt" and fresh[0].mode == "exclusive"
    with pytest.raises(CoordinatorError) as info:
        s.edit("f.txt", "line 2 = 0\n", "line 2 = 1\n")
    assert info.value.code == ErrorCode.LEASED
    assert counts.n["fetch"] == counts.n["get_with"] == 0  # refused on the refreshed snapshot alone


def test_a_lease_reply_is_read_in_each_of_its_forms(coord: Coordinator) -> None:
    granted = coord.lease_store.grant("other", ["a/*"], "shared", 60.0)[0]
    pairs = coord.redis.zrangebyscore(coord.lease_store.key, 0, "+inf", withscores=True)
    flat = [x for pair in pairs for x in pair]
    raw2 = [flat[0], repr(flat[1]).encode()]  # RESP2 read raw: the score as bytes
    for reply in (pairs, [list(p) for p in pairs], raw2):
        leases = coord.lease_store.live_from(reply)
        assert [(x.id, x.ends_at) for x in leases] == [(granted.id, pytest.approx(granted.ends_at, abs=1e-3))]
    assert coord.lease_store.live_from([]) == []
