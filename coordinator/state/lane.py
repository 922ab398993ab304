"""`Lane`: one pooled Redis connection kept checked out for a store's pipelines, used by whichever thread
finds it free.

Why: redis-py's `Pipeline.execute` checks a connection out of the pool and back in, wraps the call in its
retry policy and records observability figures, per call: measured on the embedded server, about twice
what the same pipeline costs sent on a connection already in hand (BENCHMARKS.md, "Figures behind design
choices"). The lane sends the queued commands on its own connection with the pipeline's own packing and
reply parsing (`Pipeline._execute_pipeline`, every redis-py release from 6.1 on has it), and nothing else.

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

from coordinator.disk.fsio import PID
from coordinator.state import connection

log = logging.getLogger("coordinator.state.views")

# redis-py's private names the lane relies on (every release from 6.1 to 8.1 has them). A release that
# moved them must not break the package: without the parser's names, replies are read through
# `conn.read_response` (`reply_reader`); without the pipeline's `_execute_pipeline`, no lane is made
# (`supported`) and every pipeline goes the pool's way, as on a cluster.
_HiredisParser: Any
NOT_ENOUGH_DATA: Any
try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser
except ImportError:  # (tests/coordinator/state/test_lane.py runs this in a subprocess)
    _HiredisParser, NOT_ENOUGH_DATA = None, object()

_HAS_POLL = hasattr(select, "poll")
_SERVER_CLOSED: str
try:  # redis-py's own words for it (a private name: its own fallback below)
    from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR as _SERVER_CLOSED
except ImportError:
    _SERVER_CLOSED = "Connection closed by server."

#: Failures after which the lane's connection is dropped and the pool's path is taken.
_LANE_FAILURES: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError)


class Batch:
    """Commands for one round trip, in the Redis protocol: what `Lane.start` sends: a third of what building
    a redis-py pipeline for the engine's record (SET, HSET, XADD) took of an in-process edit, sampled with
    py-spy in the solo edit loop (BENCHMARKS.md, "Figures behind design choices").
    The builders call `execute_command(*args)`, which a redis-py pipeline has too, so the same builder
    fills either (packed by hiredis at once), or `add_packed` (packed from a kept `template`). Their raw
    arguments are made only when asked for (`commands`: `replay` copies them onto a pipeline for the
    pool's path, which a started batch takes when the lane is busy or cannot send)."""

    __slots__ = ("_count", "_later", "_wire")

    def __init__(self) -> None:
        self._wire: list[bytes] = []  # the commands in the protocol, in order
        self._later: list[tuple[Any, tuple[Any, ...]]] = []  # (None, raw command) or (make, its arguments)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def execute_command(self, *args: Any) -> None:
        self._wire.append(hiredis.pack_command(args))
        self._later.append((None, args))
        self._count += 1

    def add_packed(self, wire: bytes, count: int, make: Callable[..., list[tuple[Any, ...]]], *args: Any) -> None:
        """`count` commands already in the Redis protocol (`wire`, made from a `template`); `make(*args)`
        gives their raw arguments (called only for `commands`). The caller owes `wire == packed(make(*args))`
        (tests/coordinator/state/test_lane.py checks every template against hiredis's packing)."""
        self._wire.append(wire)
        self._later.append((make, args))
        self._count += count

    @property
    def commands(self) -> list[tuple[Any, ...]]:
        """Every command's raw arguments, in order."""
        out: list[tuple[Any, ...]] = []
        for make, args in self._later:
            if make is None:
                out.append(args)
            else:
                out.extend(make(*args))
        return out

    def packed(self) -> bytes:
        """The commands in the Redis protocol. Arguments are str, bytes, int or float (hiredis writes a
        float as its repr, as redis-py does)."""
        return b"".join(self._wire)

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
        # What the current socket (`_polled`) is read and polled with (`_tune`).
        self._polled: Any = None
        self._parser: Any = None
        self._reader: Any = None
        self._fill: Any = None
        self._push: Any = None
        self._poller: Any = None
        self._buffer = bytearray(65536)  # what `_fill_now` reads into

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
            conn, data = self._connection(), batch.packed()
            if self._poller is not None and conn._sock is self._polled:  # a plain socket (`_tune`)
                self._send(conn, data)
            else:
                conn.send_packed_command([data])
        except _LANE_FAILURES:
            self._drop()
            self._lock.release()
            return _given(fallback())
        except BaseException:
            self._lock.release()
            raise
        self._pending += len(batch)
        return self._finisher()

    def _send(self, conn: Any, data: bytes) -> None:
        """`conn.send_packed_command([data])` on a plain socket (`_tune`), without the poll(2) a socket with
        a timeout makes before each send: one write(2) on its descriptor (non-blocking, as Python keeps a
        socket with a timeout), the rest, if the socket buffer was full, by `sendall` with its timeout. The
        round trip is counted and a failure reported as redis-py does (the connection disconnected, a
        TimeoutError or a ConnectionError). The descriptor is asked of the socket at each send, as the
        socket's own send does (a socket closed meanwhile answers -1, which write(2) refuses)."""
        connection.count_round_trip()
        sock = conn._sock
        try:
            try:
                n = os.write(sock.fileno(), data)
            except BlockingIOError:
                n = 0
            if n < len(data):
                sock.sendall(memoryview(data)[n:])
        except TimeoutError as exc:
            conn.disconnect()
            raise redis.TimeoutError("Timeout writing to socket") from exc
        except OSError as exc:
            conn.disconnect()
            raise redis.ConnectionError(f"Error {exc.errno} while writing to socket. {exc.strerror}.") from exc

    def _fill_now(self) -> None:
        """The parser's `read_from_socket` on a plain socket (`_tune`): the bytes there already taken with
        one read(2) on its descriptor, without the poll(2) first (the usual case: the server answered
        while the caller worked); when none are there yet, `read_from_socket` itself waits for them."""
        buffer = self._buffer
        try:
            n = os.readv(self._polled.fileno(), (buffer,))
        except BlockingIOError:
            self._parser.read_from_socket()
            return
        except OSError as exc:
            raise redis.ConnectionError(f"Error while reading from socket: {exc.args}") from exc
        if n == 0:
            raise redis.ConnectionError(_SERVER_CLOSED)
        self._reader.feed(buffer, 0, n)

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
        one read even when one is an error (the first error is raised then: the socket never desyncs).
        Read as `reply_reader` reads them; on a plain connection straight from its hiredis reader, known
        per socket (`_tune`), in bulk: when the count is right and every reply is of a usual type (bytes,
        int, None, str, float), none is an error or a push; otherwise they are sorted out (`_sort_out`)."""
        conn = self._conn
        if conn._sock is not self._polled:
            self._tune(conn)
        reader = self._reader
        if reader is None:
            return self._collect_by(reply_reader(conn))
        gets, fill, n = reader.gets, self._fill, self._pending
        try:
            replies = list(iter(gets, NOT_ENOUGH_DATA))  # every reply the reader holds, in one C loop
            while len(replies) < n:
                fill()
                replies.extend(iter(gets, NOT_ENOUGH_DATA))
            if len(replies) != n or not _USUAL.issuperset(map(type, replies)):
                replies = self._sort_out(replies, n)
        except BaseException:
            conn.disconnect()  # as redis-py's read_response does on any failure
            raise
        self._pending = 0
        return replies

    def _sort_out(self, replies: list[Any], n: int) -> list[Any]:
        """The `n` replies owed among `replies` (read in bulk by `_collect`) as `reply_reader` gives them: a
        RESP3 push is no reply (handed to the parser, as redis-py does; the replies it took the place of
        are read on), a reply beyond the `n` owed is a lost sync (ConnectionError), then `_settle`."""
        push, gets, fill = self._push, self._reader.gets, self._fill
        kept: list[Any] = []
        for reply in replies:
            if push is not None and isinstance(reply, push):
                self._parser.handle_push_response(reply)
            else:
                kept.append(reply)
        while len(kept) < n:
            reply = gets()
            if reply is NOT_ENOUGH_DATA:
                fill()
            elif push is not None and isinstance(reply, push):
                self._parser.handle_push_response(reply)
            else:
                kept.append(reply)
        if len(kept) != n:
            raise redis.ConnectionError(f"{len(kept)} replies came for {n} commands")
        return _settle(kept)

    def _collect_by(self, read: Callable[[], Any]) -> list[Any]:
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
            if conn is None or self._pid != PID[0]:
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
        of a server that went away. On a plain connection over a socket with no TLS layer (`_tune`), what
        redis-py's `can_read(timeout=0)` looks at, asked directly: bytes the hiredis reader holds already,
        then one poll(2) of the socket. Otherwise redis-py's `can_read` itself."""
        if conn._sock is not self._polled:
            self._tune(conn)
        poller = self._poller
        if poller is None:
            return bool(conn.can_read(timeout=0))
        return bool(self._reader.has_data() or poller.poll(0))

    def _unwire(self) -> None:
        self._polled = self._parser = self._reader = self._fill = self._push = self._poller = None

    def _tune(self, conn: Any) -> None:
        """What the lane reads `conn`'s current socket with, found once per socket (a reconnect makes a new
        socket, and redis-py a new hiredis reader with it): on a plain connection (`reply_reader`'s
        conditions) its parser, hiredis reader, socket filler and RESP3 push type, and, over a socket with
        no TLS layer (whose decrypted bytes may wait above the socket), a poller registered for it."""
        sock = conn._sock
        self._unwire()
        self._polled = sock
        parser: Any = getattr(conn, "_parser", None)
        reader = getattr(parser, "_reader", None)
        if sock is None or reader is None or not _plain(conn, parser):
            return
        self._parser, self._reader, self._fill = parser, reader, parser.read_from_socket
        self._push = getattr(parser, "_hiredis_PushNotificationType", None)  # RESP3 with hiredis >= 3.2
        if _HAS_POLL and not hasattr(sock, "pending"):
            poller = select.poll()
            try:
                poller.register(sock, select.POLLIN)
            except (ValueError, OSError):  # a socket closed under it: the send or the probe finds it lost
                return
            self._poller, self._fill = poller, self._fill_now

    def _connection(self) -> Any:
        """The lane's connection, with every reply owed read. Raises a lane failure if that fails."""
        if self._conn is not None and self._pid == PID[0]:
            self._drain()
            return self._conn
        self._conn = self._pool.get_connection()  # (after a fork, the parent's is forgotten: rule 3)
        self._pid = PID[0]
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
        self._unwire()
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
            if self._conn is not None and self._pid == PID[0]:
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


#: Reply types `Lane._collect` takes as they come (no error, no push, no list that may hold an error).
_USUAL = frozenset({bytes, int, type(None), str, float})


def _settle(replies: list[Any]) -> list[Any]:
    """`replies` as `reply_reader` would have given them: a lost connection (an error reply hiredis made a
    ConnectionError, alone or first in a list) raised at once, the first refused command raised once
    every reply is looked at; otherwise `replies` themselves."""
    first: redis.ResponseError | None = None
    for reply in replies:
        if isinstance(reply, redis.ConnectionError):
            raise reply
        if isinstance(reply, list) and reply and isinstance(reply[0], redis.ConnectionError):
            raise reply[0]
        if isinstance(reply, redis.ResponseError):
            first = first or reply
    if first is not None:
        raise first
    return replies


def _plain(conn: Any, parser: Any) -> bool:
    """`conn` reads its replies the plain way (see `reply_reader`)."""
    return (
        type(parser) is _HiredisParser
        and getattr(type(conn), "read_response", None) is _PLAIN_READ
        and (str(getattr(conn, "protocol", 2)) != "3" or hasattr(parser, "handle_push_response"))
        and not getattr(conn, "health_check_interval", None)
        and getattr(parser, "_next_response", NOT_ENOUGH_DATA) is NOT_ENOUGH_DATA
    )
