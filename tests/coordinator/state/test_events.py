"""Change events (one per successful write, on a Redis stream), `Coordinator.events()`, the `watch`
command, and the "files you read have changed" notices."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.cli import main as cli_main
from coordinator.state.events import ReadTracker, parse_event, queue_event, since_id


@pytest.mark.topology
def test_every_write_publishes_one_event(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text("one\ntwo\nthree\n")
    s = coord.session("A")
    s.read("a.py")
    s.edit("a.py", "two\n", "2\n2b\n")
    s.write("b.py", "new\n")
    s.undo("b.py")  # removes it again
    events = list(coord.events(since="0", timeout_s=0.05))
    assert [(e.path, e.operation, e.version) for e in events] == [
        ("a.py", "edit", 1),
        ("b.py", "write", 1),
        ("b.py", "undo", 2),
    ]
    assert events[0].ranges == ((2, 3),) and events[0].session == "A" and not events[0].rebased
    assert events[0].hash == s.read("a.py").hash
    assert events[2].hash is None and events[2].ranges == ()
    assert [e.path for e in coord.events(since="0", paths=["*.py"], timeout_s=0.05)] == ["a.py", "b.py", "b.py"]
    assert [e.path for e in coord.events(since="0", paths=["a.*"], timeout_s=0.05)] == ["a.py"]
    assert [e.id for e in coord.recent_events(2)] == [e.id for e in events[1:]]
    assert json.loads(json.dumps(events[0].to_dict()))["ranges"] == [[2, 3]]


def test_refused_writes_publish_nothing_and_events_can_be_off(root: Path) -> None:
    (root / "a.py").write_text("x\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none", events=False) as c:
        s = c.session("A")
        s.read("a.py")
        s.edit("a.py", "x", "y")
        assert c.recent_events() == []
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        s = c.session("A")
        with pytest.raises(CoordinatorError) as info:
            s.edit("a.py", "y", "z")  # not read in this session's view: refused
        assert info.value.code is ErrorCode.NOT_READ
        assert (root / "a.py").read_text() == "y\n"
        assert c.recent_events() == []


def test_event_encoding_round_trip() -> None:
    r = fakeredis.FakeRedis()
    pipe = r.pipeline()
    queue_event(pipe, "ns", path="p", session="s", version=3, operation="edit", ranges=[(1, 2)], when=5.5, digest="ab")
    pipe.execute()
    ((entry_id, fields),) = r.xrange("ec:{ns}:events")
    e = parse_event(entry_id, fields)
    assert e is not None and (e.path, e.version, e.ranges, e.time, e.hash) == ("p", 3, ((1, 2),), 5.5, "ab")
    assert parse_event(b"1-0", {b"junk": b"1"}) is None
    assert since_id(None) == "$" and since_id(1.5) == "1500-0" and since_id("0") == "0"


@pytest.mark.topology
def test_notices_name_other_files_changed_since_read(root: Path, coord: Coordinator) -> None:
    assert coord.tracker is not None
    coord.tracker.interval_s = 0
    for name in ("a.py", "b.py", "c.py"):
        (root / name).write_text(f"{name}\n")
    a, b = coord.session("A"), coord.session("B")
    for name in ("a.py", "b.py", "c.py"):
        a.read(name)
    b.read("b.py")
    b.read("c.py")
    b.edit("b.py", "b.py", "B")
    b.edit("c.py", "c.py", "C")
    r = a.edit("a.py", "a.py", "A")
    assert r.notice.startswith("2 files you read have changed since: b.py (by B), c.py (by B)")
    assert "Note: 2 files" in r.message
    assert a.edit("a.py", "A", "AA").notice == ""  # told once
    a.read("b.py")
    b.edit("c.py", "C", "CC")
    assert a.read("a.py").notice.startswith("1 file you read has changed since: c.py (by B)")


@pytest.mark.topology
def test_coordinator_notices_on_demand_are_told_once_and_by_the_session(root: Path, coord: Coordinator) -> None:
    """`Coordinator.notices` (the engine owns the lookup; LocalClient and Session call it): the files the
    session read that another session wrote since, each change once, never the session's own writes."""
    for name in ("a.py", "b.py"):
        (root / name).write_text(f"{name}\n")
    a, b = coord.session("A"), coord.session("B")
    assert coord.notices("A") is None  # nothing tracked yet: no lookup at all
    a.read("a.py")
    a.read("b.py")
    a.edit("a.py", "a.py", "A")
    assert coord.notices("A") is None  # its own write is no news
    b.read("b.py")
    b.edit("b.py", "b.py", "B")
    n = coord.notices("A")
    assert n is not None and (n.paths, n.writers) == (("b.py",), ("B",))
    assert a.notices() is None  # told once, whichever way it is asked
    b.edit("b.py", "B", "BB")
    n = a.notices()
    assert n is not None and n.paths == ("b.py",)
    with pytest.raises(CoordinatorError) as exc:
        coord.notices("")
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT


def test_notices_are_none_when_notices_are_off(root: Path) -> None:
    (root / "a.py").write_text("a\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), notices=False) as c:
        c.session("A").read("a.py")
        c.session("B").read("a.py")
        c.session("B").write("a.py", "b\n")
        assert c.notices("A") is None


def test_read_tracker_is_bounded_and_rate_limited() -> None:
    t = ReadTracker(max_paths=3, interval_s=10)
    for i in range(5):
        t.saw("s", f"f{i}", "h")
    assert t.due("s", exclude="f4", now=100.0) == ["f2", "f3"]
    assert t.due("s", exclude="f4", now=105.0) == []  # within the interval
    assert t.due("other", exclude="x") == []


def test_follow_blocks_until_a_write_and_watch_prints_it(real_redis_root: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (real_redis_root / "f.txt").write_text("1\n")
    with Coordinator(real_redis_root, durability="none") as coord:
        s = coord.session("writer")
        s.read("f.txt")

        since = time.time()  # the follower asks from here, so it cannot miss the write whenever it starts
        got: list[Any] = []
        following = threading.Event()

        def follow() -> None:
            following.set()
            got.extend(itertools.islice(coord.events(since=since, timeout_s=10), 1))

        t = threading.Thread(target=follow)
        t.start()
        assert following.wait(5)
        assert got == [] and t.is_alive()  # blocked: nothing has been written yet
        s.edit("f.txt", "1", "2")
        t.join(15)
        assert not t.is_alive()
        assert [(e.path, e.session, e.version) for e in got] == [("f.txt", "writer", 1)]
    code = cli_main(["watch", "--root", str(real_redis_root), "--since", "0", "--timeout", "0.2", "--json"])
    assert code == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["path"], x["version"]) for x in lines] == [("f.txt", 1)]
    code = cli_main(["watch", "--root", str(real_redis_root), "--last", "5", "--timeout", "0.1"])
    assert code == 0 and "v1 f.txt edit by writer" in capsys.readouterr().out
