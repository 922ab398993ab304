"""state_check "cached" (the default): no Redis round trip in the way of an edit whose view this process
holds; the disk decides, and losing Redis may only cause refusals (docs/engine.md, "How it works")."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis.connection

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.disk.layout import redis_dir, state_dir_of
from coordinator.engine import leasing


def test_cached_is_the_default() -> None:
    import inspect

    assert inspect.signature(Coordinator).parameters["state_check"].default == "cached"


def test_no_view_held_here_is_refused_while_redis_is_down(root: Path) -> None:
    """Two coordinators on one server stand for two processes: only the one that recorded the view
    holds it. With Redis unreachable, the other cannot know the view and refuses."""
    server = fakeredis.FakeServer()
    (root / "f.txt").write_text("a\n")
    with (
        Coordinator(root, redis_client=fakeredis.FakeRedis(server=server), durability="none") as here,
        Coordinator(root, redis_client=fakeredis.FakeRedis(server=server), durability="none") as there,
    ):
        here.session("s").read("f.txt")
        there.session("s").edit("f.txt", "a", "b")  # Redis knows the view: another process may use it
        server.connected = False
        with pytest.raises(CoordinatorError) as ei:
            there.session("t").write("g.txt", "new\n")  # nothing known about t anywhere
        assert ei.value.code == ErrorCode.STATE_UNAVAILABLE
    assert (root / "f.txt").read_text() == "b\n" and not (root / "g.txt").exists()


def test_a_held_view_survives_a_flushed_redis_and_always_does_not(root: Path) -> None:
    r = fakeredis.FakeRedis()
    (root / "f.txt").write_text("a\n")
    with (
        Coordinator(root, redis_client=r, durability="none") as cached,
        Coordinator(root, redis_client=r, durability="none", state_check="always") as strict,
    ):
        s, t = cached.session("s"), strict.session("t")
        s.read("f.txt")
        t.read("f.txt")
        r.flushall()  # a restart or failover that lost the read state
        with pytest.raises(CoordinatorError) as ei:
            t.edit("f.txt", "a", "x")
        assert ei.value.code == ErrorCode.NOT_READ  # "always" asks Redis, which no longer knows t's view
        res = s.edit("f.txt", "a", "b")  # the disk decides: s's view is these very bytes
        assert res.version == 1 and not res.warnings
    assert (root / "f.txt").read_text() == "b\n"


def test_a_held_view_that_is_out_of_date_is_still_refused(root: Path) -> None:
    r = fakeredis.FakeRedis()
    (root / "f.txt").write_text("a\n")
    with Coordinator(root, redis_client=r, durability="none") as c:
        s = c.session("s")
        s.read("f.txt")
        r.flushall()
        (root / "f.txt").write_text("changed outside\n")
        with pytest.raises(CoordinatorError) as ei:
            s.edit("f.txt", "a", "b")
        assert ei.value.code in (ErrorCode.STALE, ErrorCode.NOT_READ)
    assert (root / "f.txt").read_text() == "changed outside\n"


def _redis_pid(root: Path) -> int:
    return int((redis_dir(state_dir_of(root)) / "redis.pid").read_text().strip())


def test_unresponsive_redis_held_view_writes_with_a_warning_unknown_view_is_refused(
    real_redis_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real server frozen (SIGSTOP: its socket stays open, nothing answers). The lease snapshot is made
    long-lived here so that only the view decides."""
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 3600.0)
    root = real_redis_root
    (root / "f.txt").write_text("a\n")
    (root / "g.txt").write_text("g\n")
    with Coordinator(root, durability="none", redis_timeout=0.5, notices=False) as c:
        s, t = c.session("s"), c.session("t")
        s.read("f.txt")
        s.edit("f.txt", "a", "b")  # view held, lease snapshot taken
        pid = _redis_pid(root)
        os.kill(pid, signal.SIGSTOP)
        try:
            res = s.edit("f.txt", "b", "c")  # no round trip before the lock: the write lands
            assert (root / "f.txt").read_text() == "c\n"
            assert res.version == 2 and res.warnings and "written" in res.warnings[0]
            assert "Warning: " + res.warnings[0] in res.message  # the message is made again, with the warning
            with pytest.raises(CoordinatorError) as ei:
                t.edit("g.txt", "g", "h")  # t's view is not held here: Redis must be asked, and cannot be
            assert ei.value.code == ErrorCode.STATE_UNAVAILABLE
            with pytest.raises(CoordinatorError) as ei:
                s.edit("f.txt", "c", "d")  # the failed record dropped the held views: asked again, refused
            assert ei.value.code == ErrorCode.STATE_UNAVAILABLE
        finally:
            os.kill(pid, signal.SIGCONT)
    assert (root / "f.txt").read_text() == "c\n" and (root / "g.txt").read_text() == "g\n"
    with Coordinator(root) as again:
        assert [e.version for e in again.history("f.txt")] == [2, 1]


def _count_sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sends = [0]
    real_send = redis.connection.AbstractConnection.send_packed_command

    def counting_send(self: Any, command: Any, check_health: bool = True) -> Any:
        sends[0] += 1
        return real_send(self, command, check_health)

    def counting_lane_send() -> None:  # the state store's lane writes to the socket itself (state/lane.py)
        sends[0] += 1

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting_send)
    monkeypatch.setattr("coordinator.state.connection.count_round_trip", counting_lane_send)
    return sends


def test_default_edit_of_a_held_view_is_one_round_trip(real_redis_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The edit loop of a held view: one round trip per edit (the lease snapshot is refreshed on those same
    round trips)."""
    f = real_redis_root / "rt.txt"
    f.write_text("".join(f"line {i} = 0\n" for i in range(20)))
    with Coordinator(real_redis_root, notices=False) as coord:
        s = coord.session("rt")
        s.read("rt.txt")
        s.edit("rt.txt", "line 0 = 0", "line 0 = 1")  # warm up (script load)
        sends = _count_sends(monkeypatch)
        for i in range(1, 11):
            s.edit("rt.txt", f"line {i} = 0", f"line {i} = 1")
        monkeypatch.undo()
        assert coord.history("rt.txt")[0].version == 11
    assert 1.0 <= sends[0] / 10 < 1.5


def test_stopped_then_flushed_redis_with_the_default(real_redis_root: Path) -> None:
    """The default on a real server: stopped, every call refuses (its closed connection is seen without a
    round trip); back, the held view is used again; flushed, a held view still writes (the disk decides)
    while a session whose view is not held here is told the state was reset."""
    from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis

    root = real_redis_root
    state_dir = state_dir_of(root)
    f = root / "r.txt"
    f.write_text("a\n")
    with Coordinator(root, redis_timeout=0.5) as coord:
        s = coord.session("agent")
        s.read("r.txt")
        s.edit("r.txt", "a", "b")
        assert stop_embedded_redis(state_dir)
        for call in (lambda: s.edit("r.txt", "b", "c"), lambda: s.write("n.txt", "x"), lambda: s.read("r.txt")):
            with pytest.raises(CoordinatorError) as ei:
                call()
            assert ei.value.code == ErrorCode.STATE_UNAVAILABLE
        assert f.read_text() == "b\n" and not (root / "n.txt").exists()
        ensure_embedded_redis(state_dir)  # back, with its data
        s.edit("r.txt", "b", "c")
        with Coordinator(root) as elsewhere:  # another process's view of the same session comes from Redis
            elsewhere.session("agent").edit("r.txt", "c", "d")
        s.edit("r.txt", "d", "e")  # its held view is out of date: checked again in Redis, which knows better
        with Coordinator(root) as elsewhere:
            elsewhere.session("t").read("r.txt")  # t's view: in Redis, and held only in that process
        coord.redis.flushall()  # the state is lost
        s.edit("r.txt", "e", "f")  # s's view is held here, and these very bytes: written
        with Coordinator(root) as elsewhere, pytest.raises(CoordinatorError) as ei:
            elsewhere.session("t").edit("r.txt", "f", "g")  # t's view was only in Redis: gone
        assert f.read_text() == "f\n"
    assert ei.value.code == ErrorCode.NOT_READ and ei.value.details.get("state_reset")
