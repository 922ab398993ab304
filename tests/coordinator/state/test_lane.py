"""The lane (coordinator/state/lane.py): post-write pipelines on a connection kept in hand, on a real
(embedded) Redis. It must not check a connection out per call, must give way when busy, must survive the
server dropping its connection (the pipeline still lands, the pool's way), and never use a connection
checked out by another process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from coordinator import Coordinator
from coordinator.state import lane
from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis
from coordinator.state.lane import Batch, Lane, reply_reader
from tests import REPO_ROOT


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


def test_the_probe_polls_the_socket_and_anything_left_to_read_makes_it_stale(client: redis.Redis) -> None:
    """A healthy probe is one poll of the socket (redis-py's can_read is not called); a reply nobody asked
    for, bytes the hiredis reader holds, or the server's EOF each make the connection stale (dropped)."""
    for spoil in ("reply", "buffered", "killed"):
        lane = Lane(client)
        lane.execute(_pipe(client, 0))
        assert lane.probe()  # (the socket's poller is set up here)
        conn: Any = lane._conn

        def no_can_read(*a: Any, **k: Any) -> bool:
            raise AssertionError("the healthy probe asked redis-py")

        conn.can_read = no_can_read
        assert lane.probe() and lane.probe()
        del conn.can_read
        if spoil == "reply":
            conn.send_packed_command(conn.pack_command("PING"))
        elif spoil == "buffered":
            conn._parser._reader.feed(b"+PONG\r\n")
        else:
            client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        deadline = time.monotonic() + 5
        while lane.probe() and time.monotonic() < deadline:  # (the reply or the EOF on its way)
            time.sleep(0.01)
        assert lane._conn is None, spoil  # dropped
        assert lane.execute(_pipe(client, 1))[2] >= 2  # and a fresh connection takes over, in sync
        lane.close()


def test_a_connection_of_another_process_is_never_used(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    import coordinator.state.lane as mod

    lane = Lane(client)
    lane.execute(_pipe(client, 0))
    first = lane._conn
    monkeypatch.setattr(mod, "PID", [-7])  # as in a child after fork (fsio.PID, renewed by its at-fork hook)
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


def _batch(i: int) -> Batch:
    batch = Batch()
    batch.execute_command("SET", f"k{i}", i, "EX", 600)
    batch.execute_command("HSET", "h", "v", i, "t", 1.25 + i)
    batch.execute_command("INCR", "n")
    return batch


def test_a_started_batch_lands_and_its_replies_are_read_before_the_lane_is_free(client: redis.Redis) -> None:
    lane = Lane(client)
    fallbacks = [0]

    def fallback() -> None:
        fallbacks[0] += 1

    for i in range(3):
        finish = lane.start(_batch(i), fallback)
        busy = lane.start(_batch(10), lambda: _batch(10).replay(client.pipeline(transaction=False)).execute())
        busy()  # a second caller while replies are owed: the pool's way, at once
        finish()
    assert fallbacks[0] == 0
    assert client.get("k2") == b"2" and client.get("k10") == b"10" and 0 < client.ttl("k2") <= 600
    assert client.hget("h", "t") in (b"3.25", b"11.25")  # a float argument as redis-py writes it
    assert int(client.get("n") or 0) == 6  # three started, three through the fallback
    assert lane.execute(_pipe(client, 7))[2] == 7  # nothing left unread on the lane's connection


def test_a_refused_command_of_a_started_batch_is_raised_by_its_finisher(client: redis.Redis) -> None:
    lane = Lane(client)
    client.set("s", "text")
    batch = Batch()
    batch.execute_command("INCR", "s")  # not an integer: the server refuses it
    batch.execute_command("SET", "after", 1)
    finish = lane.start(batch, lambda: None)
    with pytest.raises(redis.ResponseError):
        finish()
    assert client.get("after") == b"1"  # the commands after it still ran, and the lane is in sync
    assert lane.execute(_pipe(client, 1)) == [True, 1, 1]


def _tuned_lane(client: redis.Redis) -> tuple[Lane, Any]:
    """A lane whose connection was used and probed (what it reads the socket with is known), and that
    connection's parser."""
    lane = Lane(client)
    lane.execute(_pipe(client, 0))
    assert lane.probe()
    assert lane._conn is not None
    return lane, lane._conn._parser


def test_a_push_among_the_replies_is_handed_to_the_parser_and_is_no_reply(client: redis.Redis) -> None:
    lane, parser = _tuned_lane(client)
    if getattr(parser, "_hiredis_PushNotificationType", None) is None or str(lane._conn.protocol) != "3":
        pytest.skip("RESP3 pushes need redis-py's RESP3 default and hiredis >= 3.2")
    pushed: list[Any] = []
    parser.handle_push_response = pushed.append
    finish = lane.start(_batch(1), lambda: [])
    parser._reader.feed(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk1\r\n")  # before the replies
    assert finish() == [b"OK", 1, 2]  # SET, HSET (one new field), INCR (the second)
    assert pushed == [[b"invalidate", [b"k1"]]]
    assert lane.execute(_pipe(client, 2))[2] == 3  # in sync


def test_a_reply_more_than_owed_is_a_lost_sync_and_the_connection_is_dropped(client: redis.Redis) -> None:
    lane, parser = _tuned_lane(client)
    finish = lane.start(_batch(1), lambda: [])
    parser._reader.feed(b"+OK\r\n")  # one reply nobody asked for, ahead of the batch's
    with pytest.raises(redis.ConnectionError):
        finish()
    assert lane._conn is None  # dropped
    assert client.get("k1") == b"1"  # the batch ran
    assert lane.execute(_pipe(client, 2))[2] == 3  # and a fresh connection takes over


def test_a_batch_the_lane_cannot_send_goes_the_pools_way(client: redis.Redis) -> None:
    lane = Lane(client)
    lane.execute(_pipe(client, 0))
    assert lane._conn is not None
    lane._conn._sock.close()  # the send fails on this socket  # type: ignore[union-attr]
    ran: list[Any] = []
    finish = lane.start(_batch(1), lambda: ran.append(_batch(1).replay(client.pipeline(transaction=False)).execute()))
    finish()
    assert ran == [[True, 1, 2]]  # the fallback ran once, with redis-py's parsed replies
    assert lane.execute(_pipe(client, 2))[2] == 3


def test_replay_parses_replies_as_a_pipeline_would(client: redis.Redis) -> None:
    replies = _batch(4).replay(client.pipeline(transaction=False)).execute()
    assert replies == [True, 2, 1]
    conn = client.connection_pool.get_connection()
    try:  # the bytes hiredis packs are redis-py's own for the same commands (str, int and float arguments)
        assert _batch(4).packed() == b"".join(conn.pack_commands(_batch(4).commands))
    finally:
        client.connection_pool.release(conn)


def test_replies_are_read_from_the_hiredis_reader_on_a_plain_connection(client: redis.Redis) -> None:
    conn: Any = client.connection_pool.get_connection()
    try:
        read = reply_reader(conn)
        assert read != conn.read_response  # the direct way
        client.set("s", "text")
        conn.send_packed_command(conn.pack_commands([("SET", "a", 1), ("INCR", "s"), ("GET", "a")]))
        assert read() == b"OK"
        with pytest.raises(redis.ResponseError):
            read()  # the refused INCR, raised
        assert read() == b"1"  # and the reply after it: in sync
    finally:
        client.connection_pool.release(conn)


def test_a_connection_that_reads_its_own_way_keeps_it(client: redis.Redis) -> None:
    """Sentinel's connection overrides read_response (a primary that became a replica must read as a lost
    connection): its replies go through it, as do those of health-checked connections."""
    pool: Any = client.connection_pool
    base = pool.connection_class
    overriding = type("Overriding", (base,), {"read_response": lambda self, *a, **k: base.read_response(self, *a, **k)})
    for conn, direct in (
        (base(**pool.connection_kwargs), True),
        (overriding(**pool.connection_kwargs), False),
        (base(**{**pool.connection_kwargs, "health_check_interval": 30}), False),
    ):
        conn.connect()
        try:
            assert (reply_reader(conn) != conn.read_response) is direct
            conn.send_packed_command(conn.pack_command("PING"))
            assert reply_reader(conn)() in (b"PONG", True)  # either way, the reply
        finally:
            conn.disconnect()


def test_a_connection_the_server_closed_reads_as_lost(client: redis.Redis) -> None:
    conn: Any = client.connection_pool.get_connection()
    try:
        read = reply_reader(conn)
        conn.send_packed_command(conn.pack_command("CLIENT", "ID"))
        own_id = read()
        client.client_kill_filter(_id=own_id)
        with pytest.raises((redis.ConnectionError, OSError)):
            conn.send_packed_command(conn.pack_command("PING"), check_health=False)
            read()
        assert conn._sock is None  # disconnected, as redis-py's own read would leave it
    finally:
        client.connection_pool.release(conn)


_WITHOUT_PRIVATE_NAMES = r"""
import sys, tempfile
from pathlib import Path
import redis.client
{block}
from coordinator import Coordinator
from coordinator.state import lane
from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis
root = Path(tempfile.mkdtemp()) / "repo"
root.mkdir()
(root / "f.txt").write_text("a = 1\n")
url = ensure_embedded_redis(root / ".edit-coordinator")
try:
    with Coordinator(root, url) as coord:
        s = coord.session("s")
        s.read("f.txt")
        for i in range(1, 4):
            res = s.edit("f.txt", f"a = {{i}}", f"a = {{i + 1}}")
            assert not res.warnings, res.warnings
        kept = coord.state._lane
        print("lane", kept is not None, "version", coord.state.meta("f.txt")["version"])
        print("parser names", lane._HiredisParser is not None)
        other = coord.session("t")
        other.read("f.txt")
        other.edit("f.txt", "a = 4", "a = 5")
finally:
    stop_embedded_redis(root / ".edit-coordinator")
print((root / "f.txt").read_text().strip())
"""


@pytest.mark.parametrize(
    ("block", "lane", "names"),
    [
        # a redis-py whose hiredis parser module moved: replies are read through read_response
        ("sys.modules['redis._parsers.hiredis'] = None", True, False),
        # a redis-py the lane does not support: no lane, every pipeline the pool's way
        ("import coordinator.state.lane as rl; rl.supported = lambda: False", False, True),
    ],
)
def test_a_redis_py_without_the_private_names_still_records_every_write(block: str, lane: bool, names: bool) -> None:
    script = _WITHOUT_PRIVATE_NAMES.format(block=block)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"lane {lane} version 3" in out.stdout
    assert f"parser names {names}" in out.stdout
    assert out.stdout.strip().endswith("a = 5")


def test_the_lane_is_supported_only_where_the_pipeline_has_what_it_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lane.supported()
    monkeypatch.delattr(redis.client.Pipeline, "_execute_pipeline")
    assert not lane.supported()


@pytest.mark.parametrize(
    ("session", "key", "op", "digest"),
    [("s1", "src/a.py", "edit", "ab" * 16), ("sé 100%", "dir/ü %d %b.txt", "wrïte", None)],
)
def test_record_templates_pack_what_hiredis_packs(session: str, key: str, op: str, digest: str | None) -> None:
    """The record's SET, HSET and XADD packed from kept templates are byte for byte what hiredis packs from
    the raw arguments (which `replay` sends the pool's way), including names with % and non-ASCII text."""
    import hiredis

    from coordinator.state import events
    from coordinator.state.views import KIND_WRITE, ReadState, StateStore

    store = StateStore(fakeredis.FakeRedis(), "ns %s")
    rs = ReadState("cd" * 16, 123456789, 42, 0, 0, 1764780000.123456, KIND_WRITE)
    batch = Batch()
    store._queue_record(batch, session, key, rs, 7, op, digest, register=True)
    events.queue_event(batch, "ns %s", path=key, session=session, version=7, operation=op, ranges=[(3, 5), (9, 9)],
                       when=rs.time, digest=digest, rebased=True)  # fmt: skip
    events.queue_event(batch, "ns", path=key, session=session, version=8, operation=op, ranges=[(1, 2)],
                       when=2.5, digest=None)  # fmt: skip
    assert len(batch) == 5  # SET, HSET, ZADD (raw), two XADDs
    assert batch.packed() == b"".join(hiredis.pack_command(args) for args in batch.commands)
    assert batch.commands[1][batch.commands[1].index("hash") + 1] == (digest or rs.hash)


@pytest.mark.parametrize(
    ("session", "key", "op", "digest", "rebased", "same_time"),
    [
        ("s1", "src/a.py", "edit", "ab" * 16, False, True),
        ("sé 100%", "dir/ü %d %b.txt", "wrïte", None, True, False),
        ("s2", "b.txt", "multi_edit", "cd" * 16, True, True),
    ],
)
def test_the_record_and_its_event_from_one_template_are_what_they_are_apart(
    session: str, key: str, op: str, digest: str | None, rebased: bool, same_time: bool
) -> None:
    """The usual write's SET, HSET and XADD packed from one kept template are the bytes and the raw
    commands of the record's template followed by the event's (events.queue_event), and hiredis's."""
    import hiredis

    from coordinator.state import events
    from coordinator.state.views import KIND_WRITE, ReadState, StateStore

    store = StateStore(fakeredis.FakeRedis(), "ns")
    rs = ReadState("cd" * 16, 123456789, 42, 0, 0, 1764780000.123456, KIND_WRITE)
    when = rs.time if same_time else 1764780001.5
    for _ in range(2):  # the template made, then kept
        together, apart = Batch(), Batch()
        store._queue_record_and_event(together, session, key, rs, 7, op, digest, ("ns %s", [(3, 5)], when, rebased))
        store._queue_record(apart, session, key, rs, 7, op, digest, register=False)
        events.queue_event(apart, "ns %s", path=key, session=session, version=7, operation=op, ranges=[(3, 5)],
                           when=when, digest=digest, rebased=rebased)  # fmt: skip
        assert len(together) == len(apart) == 3
        assert together.commands == apart.commands
        assert together.packed() == apart.packed() == b"".join(hiredis.pack_command(a) for a in apart.commands)


def test_a_started_batch_whose_connection_the_server_closed_is_reported_and_dropped(client: redis.Redis) -> None:
    lane, _ = _tuned_lane(client)
    client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # the lane's, after its probe
    ran: list[Any] = []
    finish = lane.start(_batch(1), lambda: ran.append(1) or [])
    if not ran:  # the send went out on the closed socket: the read finds the EOF
        with pytest.raises((redis.ConnectionError, OSError)):
            finish()
    assert lane._conn is None  # dropped either way
    assert lane.execute(_pipe(client, 2))[2] >= 2  # and a fresh connection takes over


def test_a_lane_on_connections_that_read_their_own_way_reads_and_probes_through_redis_py(client: redis.Redis) -> None:
    """Sentinel's connections override read_response: the lane then reads a batch's replies through it
    and probes with redis-py's can_read (nothing of the connection is read around it)."""
    pool: Any = client.connection_pool
    base = pool.connection_class
    reads: list[int] = []

    def read_response(self: Any, *a: Any, **k: Any) -> Any:
        reads.append(1)
        return base.read_response(self, *a, **k)

    overriding = type("Overriding", (base,), {"read_response": read_response})
    other = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=overriding, **pool.connection_kwargs))
    try:
        lane = Lane(other)
        lane.execute(_pipe(other, 0))
        assert lane.probe() and lane._poller is None and lane._reader is None
        client.set("s", "text")
        batch = _batch(1)
        batch.execute_command("INCR", "s")  # refused
        batch.execute_command("GET", "k1")
        reads.clear()
        finish = lane.start(batch, lambda: [])
        with pytest.raises(redis.ResponseError):
            finish()
        assert len(reads) == 5  # every reply through the connection's own read_response
        assert lane.execute(_pipe(other, 2))[2] == 3 and lane.probe()  # in sync
        lane.close()
    finally:
        other.close()


def test_a_tuned_lane_writes_and_reads_its_socket_directly(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a plain socket the batch goes out in one write(2) and replies already there are taken with one
    read(2): neither redis-py's send nor the parser's socket read (each a poll(2) first) is used, and the
    round trip is still counted."""
    from coordinator.state import connection

    kwargs = {**client.connection_pool.connection_kwargs, "socket_timeout": 2.0}  # as the engine connects
    pool = redis.ConnectionPool(connection_class=client.connection_pool.connection_class, **kwargs)
    client = redis.Redis(connection_pool=pool)  # (a socket with a timeout)
    lane, parser = _tuned_lane(client)
    conn: Any = lane._conn
    reads = [0]
    real_read = parser.read_from_socket
    monkeypatch.setattr(parser, "read_from_socket", lambda *a, **k: reads.__setitem__(0, reads[0] + 1) or real_read())
    monkeypatch.setattr(conn, "send_packed_command", lambda *a, **k: pytest.fail("redis-py's send was used"))
    trips: list[int] = []
    monkeypatch.setattr(connection, "_observer", type("O", (), {"round_trip": lambda self: trips.append(1)})())
    finish = lane.start(_batch(1), lambda: pytest.fail("the fallback ran"))
    import select as select_mod

    select_mod.select([conn._sock], [], [], 2.0)  # the replies are there
    assert finish() == [b"OK", 1, 2]
    assert reads == [0] and trips == [1]
    finish = lane.start(_slow_batch(), lambda: pytest.fail("the fallback ran"))
    assert finish() == [None]  # not there yet at first: the parser's read waits for it
    assert reads[0] >= 1


def test_a_tuned_lane_whose_socket_was_closed_sends_the_pools_way(client: redis.Redis) -> None:
    lane, _ = _tuned_lane(client)
    assert lane._conn is not None
    lane._conn._sock.close()  # its descriptor is -1 now: write(2) refuses it, nothing else is written to
    ran: list[Any] = []
    finish = lane.start(_batch(1), lambda: ran.append(_batch(1).replay(client.pipeline(transaction=False)).execute()))
    finish()
    assert ran == [[True, 1, 2]]
    assert lane.execute(_pipe(client, 2))[2] == 3


def _slow_batch() -> Batch:
    batch = Batch()
    batch.execute_command("BLPOP", "never-pushed", "0.2")
    return batch
