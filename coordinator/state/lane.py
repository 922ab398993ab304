"""`Lane`: one pooled Redis connection kept checked out for a store's pipelines, used by whichever thread
finds it free.

Why: redis-py's `Pipeline.execute` checks a connection out of the pool and back in, wraps the call in its
retry policy and records observability figures, per call. Measured on the embedded server (redis-py 8.1,
hiredis): a three-command pipeline like the engine's post-write one took 140 us that way against 65-80 us
sent on a connection already in hand; in the engine's solo edit loop the lane saved 10-40 us on the
record and halved the liveness probe before the lock (40 -> 20 us). The lane sends the queued commands
on its own connection with the pipeline's own packing and reply parsing (`Pipeline._execute_pipeline`,
every redis-py release from 6.1 on has it), and nothing else.

A caller with other work to do before it needs the replies (the engine's record of a plain write: its
snippet, result and message are still to be made) can `start` a `Batch`: its commands, kept as raw
arguments and packed by hiredis (no redis-py pipeline is built), are sent at once, the server runs them
while the caller works, and the replies are read when the caller finishes, before the call returns
(`reply_reader`: straight from the connection's hiredis reader where redis-py would read them the same
way). The round trip's wait (the server's turn on the other core, two wake-ups) overlaps the caller's own work;
the replies are still read, and a failure still reported, within the same call.

Rules, each enforced here:
1. One thread at a time: a non-blocking lock; a thread that finds the lane busy takes the pool's path
   (`pipe.execute()`), so the lane never makes anyone wait.
2. Any failure on the lane's connection (the server went away, a timeout, a Sentinel primary that became a
   replica, which redis-py reports as a ConnectionError) drops the connection (disconnected, handed back
   to the pool). Commands not sent yet (`execute`, or `start` failing to send: its fallback replays the
   batch onto a pipeline) then go the pool's way, with redis-py's retries: the same commands the pool's
   path would have re-sent after the same failure. A batch already sent by `start` is not sent again:
   the failure is raised when its replies are read, and the caller reports it.
3. Never across a fork: a connection checked out by another process is forgotten, not used or closed.
4. Standalone servers and Sentinel primaries only; a cluster routes each key to its node (no lane).
5. Only on a redis-py that has the private names it uses (`supported`); otherwise the pool's way always.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from typing import Any

import hiredis
import redis
import redis.client
import redis.connection

log = logging.getLogger("coordinator.state.views")

# redis-py's private names the lane relies on (every release from 6.1 to 8.1 has them). A release that
# moved them must not break the package: without the parser's names, replies are read through
# `conn.read_response` (`reply_reader`); without the pipeline's `_execute_pipeline`, no lane is made
# (`supported`) and every pipeline goes the pool's way, as on a cluster.
_HiredisParser: Any
NOT_ENOUGH_DATA: Any
try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser
except ImportError:  # (tests/coordinator/state/test_redislane.py runs this in a subprocess)
    _HiredisParser, NOT_ENOUGH_DATA = None, object()

_HAS_POLL = hasattr(select, "poll")

#: Failures after which the lane's connection is dropped and the pool's path is taken.
_LANE_FAILURES: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError)


class Batch:
    """Commands for one round trip, kept as their raw arguments: what `Lane.start` sends, packed by hiredis
    in one call per command. Sampled with py-spy in the solo edit loop: building a redis-py pipeline for
    the engine's record (SET, HSET, XADD), queueing its commands and letting it pack took about 15 % of
    an in-process edit; the batch takes about 5 %. The builders call `execute_command(*args)`, which a
    redis-py pipeline has too, so the same builder fills either; `replay` copies the commands onto a
    pipeline for the pool's path (and a cluster's)."""

    __slots__ = ("_wire", "commands")

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []
        self._wire: list[bytes | tuple[Any, ...]] = []  # packed runs (`add_packed`) or raw commands, in order

    def __len__(self) -> int:
        return len(self.commands)

    def execute_command(self, *args: Any) -> None:
        self.commands.append(args)
        self._wire.append(args)

    def add_packed(self, wire: bytes, *commands: tuple[Any, ...]) -> None:
        """Commands already in the Redis protocol (`wire`, made from a `template`), with their raw arguments
        (what `replay` and the replies' count use). The caller owes `wire == packed(commands)`
        (tests/coordinator/state/test_redislane.py checks every template against hiredis's packing)."""
        self.commands.extend(commands)
        self._wire.append(wire)

    def packed(self) -> bytes:
        """The commands in the Redis protocol. Arguments are str, bytes, int or float (hiredis writes a
        float as its repr, as redis-py does)."""
        return b"".join([w if isinstance(w, bytes) else hiredis.pack_command(w) for w in self._wire])

    def replay(self, pipe: Any) -> Any:
        """`pipe` with these commands queued on it (redis-py applies its reply parsing by command name)."""
        for args in self.commands:
            pipe.execute_command(*args)
        return pipe


def template(*parts: str | int | float | None) -> bytes:
    """One command in the Redis protocol with its constant arguments packed once: each None is a slot for a
    bulk string, filled with `template % (len(b1), b1, len(b2), b2, ...)` (bytes). Made once per path and
    kept (the keys and the constant arguments of a write's record), so a record packs only what changes.
    Constants are packed as hiredis packs them (str as UTF-8, int and float as their str and repr)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        if part is None:
            out.append(b"$%d\r\n%b\r\n")
            continue
        raw = part.encode() if isinstance(part, str) else repr(part).encode()
        out.append((b"$%d\r\n" % len(raw) + raw + b"\r\n").replace(b"%", b"%%"))  # a literal % stays one
    return b"".join(out)


def supported() -> bool:
    """Whether this redis-py has what the lane uses: the pipeline's `_execute_pipeline` (the parser's
    names are optional, see `reply_reader`). Without it the store makes no lane."""
    return callable(getattr(redis.client.Pipeline, "_execute_pipeline", None))


def _given(replies: list[Any]) -> Callable[[], list[Any]]:
    """What `start` returns when the pipeline already ran (no replies are owed): its replies."""
    return lambda: replies


class Lane:
    """See the module docstring."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pid = 0
        self._pending = 0  # replies sent for and not read yet (see `start`)
        self._polled: Any = None  # the socket `_readable` polls (its poller and hiredis reader beside it)
        self._poller: Any = None
        self._reader: Any = None

    def execute(self, pipe: Any) -> list[Any]:
        """The replies of the commands queued on `pipe` (a non-transactional redis-py pipeline)."""
        if not self._lock.acquire(blocking=False):
            return list(pipe.execute())
        try:
            try:
                conn = self._connection()
                return list(pipe._execute_pipeline(conn, pipe.command_stack, True))
            except _LANE_FAILURES:
                self._drop()
        finally:
            self._lock.release()
        return list(pipe.execute())

    def start(self, batch: Batch, fallback: Callable[[], list[Any]]) -> Callable[[], list[Any]]:
        """Send `batch`'s commands now and return what reads their replies: the replies, in order, as the
        server sent them (raising what the pool's path would raise: a refused command as ResponseError,
        once every reply is read; a lost connection as a lane failure). The caller does other work in
        between, then must call it exactly once; until then the lane is its own (other threads take the
        pool's path). A busy lane, or a failure sending, calls `fallback` at once (the same commands the
        pool's way: `batch.replay` onto a pipeline), and what is returned gives its replies."""
        if not self._lock.acquire(blocking=False):
            return _given(fallback())
        try:
            conn = self._connection()
            conn.send_packed_command([batch.packed()])
        except _LANE_FAILURES:
            self._drop()
            self._lock.release()
            return _given(fallback())
        except BaseException:
            self._lock.release()
            raise
        self._pending += len(batch)
        return self._finisher()

    def _finisher(self) -> Callable[[], list[Any]]:
        done = [False]

        def finish() -> list[Any]:
            if done[0]:
                return []
            done[0] = True
            try:
                return self._collect()
            except _LANE_FAILURES:
                self._drop()
                raise
            finally:
                self._lock.release()

        return finish

    def _collect(self) -> list[Any]:
        """The replies owed (those of the batch sent last, since `_connection` read any before it), every
        one read even when one is an error (the first error is raised then: the socket never desyncs)."""
        read = reply_reader(self._conn)
        replies: list[Any] = []
        first: redis.ResponseError | None = None
        while self._pending:
            self._pending -= 1
            try:
                replies.append(read())
            except redis.ResponseError as exc:
                first = first or exc
                replies.append(exc)
        if first is not None:
            raise first
        return replies

    def probe(self) -> bool:
        """Whether the lane's connection looks healthy without a round trip (a server that went away has
        closed it: the socket reads EOF); a stale one is dropped. False when the lane is busy or has no
        connection yet: the caller probes the pool's way."""
        if not self._lock.acquire(False):
            return False
        try:
            conn = self._conn
            if conn is None or self._pid != os.getpid():
                return False
            poller = self._poller  # `_readable`'s common case, inline (replies still owed would read as readable)
            if poller is not None and conn._sock is self._polled and not (self._reader.has_data() or poller.poll(0)):
                return True
            try:
                self._drain()  # the replies owed arrived: the server is there
                stale = self._readable(conn)  # an idle, healthy connection has nothing to read
            except _LANE_FAILURES:
                stale = True
            if stale:
                self._drop()
                return False
            return True
        finally:
            self._lock.release()

    def _readable(self, conn: Any) -> bool:
        """Whether the idle connection has anything to read: a reply nobody asked for, or the EOF (or error)
        of a server that went away. On a plain connection (see `reply_reader`) over a socket with no TLS
        layer, what redis-py's `can_read(timeout=0)` looks at, asked directly: bytes the hiredis reader
        holds already, then one poll(2) of the socket (registered once per socket). Otherwise redis-py's
        `can_read` itself."""
        sock = conn._sock
        if sock is not self._polled:
            self._polled, self._poller, self._reader = sock, None, None
            parser = getattr(conn, "_parser", None)
            reader = getattr(parser, "_reader", None)
            if (
                sock is not None
                and reader is not None
                and _HAS_POLL
                and not hasattr(sock, "pending")
                and _plain(conn, parser)
            ):
                self._poller, self._reader = select.poll(), reader
                self._poller.register(sock, select.POLLIN)
        poller = self._poller
        if poller is None:
            return bool(conn.can_read(timeout=0))
        return bool(self._reader.has_data() or poller.poll(0))

    def _connection(self) -> Any:
        """The lane's connection, with every reply owed read. Raises a lane failure if that fails."""
        if self._conn is not None and self._pid == os.getpid():
            self._drain()
            return self._conn
        self._conn = self._pool.get_connection()  # (after a fork, the parent's is forgotten: rule 3)
        self._pid = os.getpid()
        self._pending = 0
        return self._conn

    def _drain(self) -> None:
        """Read every reply still owed (a finisher that was left by an exception); an error is logged."""
        if not self._pending:
            return
        try:
            self._collect()
        except redis.ResponseError as exc:
            log.warning("Redis refused a command of a write's record: %s", exc)

    def _drop(self) -> None:
        self._pending = 0
        self._polled = self._poller = self._reader = None
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.disconnect()
        finally:
            self._pool.release(conn)

    def close(self) -> None:
        """Hand the connection back to the pool (the owner closes the pool itself)."""
        if not self._lock.acquire(timeout=5.0):  # a caller that never finished: leave its connection be
            log.warning("the Redis lane was still in use at close; its connection is left to the pool's close")
            return
        try:
            if self._conn is not None and self._pid == os.getpid():
                try:
                    self._drain()
                except _LANE_FAILURES:
                    pass
                self._drop()
            self._conn = None
        finally:
            self._lock.release()


_PLAIN_READ = redis.connection.Connection.read_response


def reply_reader(conn: Any) -> Callable[[], Any]:
    """What reads one reply on `conn` (raising a refused command as ResponseError, a lost connection as
    ConnectionError, TimeoutError or OSError). On a plain connection with redis-py's hiredis parser, straight
    from the parser's hiredis reader, which the parser fills from the socket: redis-py's `read_response`
    does the same through two layers per reply (about 25 lines of Python per reply; the engine's record
    owes three); RESP3 pushes are handed to the parser's `handle_push_response`, as redis-py does. On
    anything else, `conn.read_response` itself: a class that overrides it (Sentinel's connection turns a
    primary that became a replica into a ConnectionError), health checks, a reply the parser holds already
    (`_next_response`), another parser."""
    parser: Any = getattr(conn, "_parser", None)
    reader = getattr(parser, "_reader", None)
    if reader is None or not _plain(conn, parser):
        return conn.read_response  # type: ignore[no-any-return]
    fill = parser.read_from_socket
    push = getattr(parser, "_hiredis_PushNotificationType", None)  # RESP3 with hiredis >= 3.2

    def read() -> Any:
        try:
            while True:
                reply = reader.gets()
                while reply is NOT_ENOUGH_DATA:
                    fill()
                    reply = reader.gets()
                if push is None or not isinstance(reply, push):
                    break
                parser.handle_push_response(reply)  # a push is no reply: handled as redis-py does, then on
        except BaseException:
            conn.disconnect()  # as redis-py's read_response does on any failure
            raise
        if isinstance(reply, redis.ResponseError | redis.ConnectionError):
            raise reply
        if isinstance(reply, list) and reply and isinstance(reply[0], redis.ConnectionError):
            raise reply[0]
        return reply

    return read


def _plain(conn: Any, parser: Any) -> bool:
    """`conn` reads its replies the plain way (see `reply_reader`)."""
    return (
        type(parser) is _HiredisParser
        and getattr(type(conn), "read_response", None) is _PLAIN_READ
        and (str(getattr(conn, "protocol", 2)) != "3" or hasattr(parser, "handle_push_response"))
        and not getattr(conn, "health_check_interval", None)
        and getattr(parser, "_next_response", NOT_ENOUGH_DATA) is NOT_ENOUGH_DATA
    )
