"""The lane (coordinator/redislane.py): post-write pipelines on a connection kept in hand, on a real
(embedded) Redis. It must not check a connection out per call, must give way when busy, must survive the
server dropping its connection (the pipeline still lands, the pool's way), and never use a connection
checked out by another process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from coordinator import Coordinator
from coordinator.embedded import ensure_embedded_redis, stop_embedded_redis
from coordinator.redislane import Lane


@pytest.fixture
def client(tmp_path: Path) -> Iterator[redis.Redis]:
    url = ensure_embedded_redis(tmp_path / "state")
    r = redis.Redis.from_url(url)
    yield r
    r.close()
    stop_embedded_redis(tmp_path / "state")


def _counting(r: redis.Redis) -> list[int]:
    """Count the pool's checkouts from now on."""
    pool: Any = r.connection_pool
    n = [0]
    orig = pool.get_connection

    def get_connection(*a: Any, **k: Any) -> Any:
        n[0] += 1
        return orig(*a, **k)

    pool.get_connection = get_connection
    return n


def _pipe(r: redis.Redis, i: int) -> Any:
    pipe = r.pipeline(transaction=False)
    pipe.set(f"k{i}", i)
    pipe.hset("h", mapping={"v": i})
    pipe.incr("n")
    return pipe


def test_one_checkout_for_many_pipelines_and_the_replies_are_the_pools(client: redis.Redis) -> None:
    lane = Lane(client)
    checkouts = _counting(client)
    replies = [lane.execute(_pipe(client, i)) for i in range(50)]
    assert checkouts[0] == 1
    assert replies[0] == [True, 1, 1] and replies[-1] == [True, 0, 50]
    assert client.get("k49") == b"49" and client.hget("h", "v") == b"49"
    lane.close()


def test_a_busy_lane_gives_way_to_the_pool(client: redis.Redis) -> None:
    lane = Lane(client)
    lane.execute(_pipe(client, 0))
    checkouts = _counting(client)
    held = threading.Event()
    release = threading.Event()
    original = lane._connection

    def slow() -> Any:
        held.set()
        release.wait(5)
        return original()

    lane._connection = slow  # type: ignore[method-assign]
    t = threading.Thread(target=lambda: lane.execute(_pipe(client, 1)))
    t.start()
    assert held.wait(5)
    try:
        # The other thread holds the lane (its pipeline not sent yet): this one did not wait for it.
        assert lane.execute(_pipe(client, 2)) == [True, 0, 2]
        assert checkouts[0] == 1  # the pool's path
    finally:
        release.set()
    t.join(5)
    assert int(client.get("n") or 0) == 3


def test_a_connection_the_server_dropped_is_replaced_and_the_pipeline_lands(client: redis.Redis) -> None:
    lane = Lane(client)
    lane.execute(_pipe(client, 0))
    assert lane.probe()
    client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # every other client: the lane's
    assert lane.execute(_pipe(client, 1)) == [True, 0, 2]
    assert int(client.get("n") or 0) == 2 and client.get("k1") == b"1"
    assert lane.execute(_pipe(client, 2))[2] == 3  # and the lane works again


def test_the_probe_sees_a_dropped_connection(client: redis.Redis) -> None:
    lane = Lane(client)
    assert not lane.probe()  # no connection yet: the caller probes the pool's way
    lane.execute(_pipe(client, 0))
    client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert not lane.probe()  # EOF on the socket: dropped
    assert lane.execute(_pipe(client, 1))[2] == 2


def test_a_connection_of_another_process_is_never_used(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    import coordinator.redislane as mod

    lane = Lane(client)
    lane.execute(_pipe(client, 0))
    first = lane._conn
    monkeypatch.setattr(mod.os, "getpid", lambda: -7)  # as in a child after fork
    assert not lane.probe()
    lane.execute(_pipe(client, 1))
    assert lane._conn is not first


def test_the_engine_records_its_writes_on_the_lane(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    url = ensure_embedded_redis(root / ".edit-coordinator")
    try:
        with Coordinator(root, url, durability="none") as coord:
            s = coord.session("s1")
            s.write("a.txt", "a = 0\n")
            checkouts = _counting(coord.redis)
            for i in range(20):
                s.edit("a.txt", f"a = {i}", f"a = {i + 1}")
            assert checkouts[0] == 0  # neither the liveness probe nor the record checked one out
            assert coord.state.meta("a.txt")["version"] == "21"
    finally:
        stop_embedded_redis(root / ".edit-coordinator")
