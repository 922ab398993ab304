"""Read state in Redis: what each session last saw of each file.

Redis holds coordination state that is safe to lose: a session whose read state is gone reads again. It
never decides alone whether a write is safe; the engine decides that against the bytes on disk, under the
file lock. Any Redis error becomes `state_unavailable` so that callers fail closed.

Key schema (every key of one path shares the `{...}` hash tag, so one operation's keys share a cluster slot):
    ec:{<ns>:<path hash>}:rs:<session>   packed ReadState, with a TTL (default 24 h)
    ec:{<ns>:<path hash>}:meta           hash: version, writer, time, op, path, hash (content after the write)
    ec:{<ns>}:sessions                   sorted set: session id -> last activity (unix time)
Leases (leases.py) and change events (events.py) have their own keys under `ec:{<ns>}:`; the calls here take
an `extra` callback that adds their commands to the same pipeline, so they ride on a round trip that is
made anyway.
`ns` names the repository (a hash of its real root path unless given), so one Redis serves many roots.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import xxhash
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import CoordinatorError, ErrorCode

T = TypeVar("T")

# hash (16 bytes) | mtime_ns | size | offset | limit | time | kind
_PACK = struct.Struct("<16sqqiidc")
REGISTER_EVERY_S = 10.0

# KEYS: read-state key, meta key (same hash tag).
# ARGV: packed state, ttl, version, writer, time, op, path, content hash after the write.
_RECORD_WRITE_LUA = """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('HSET', KEYS[2], 'version', ARGV[3], 'writer', ARGV[4], 'time', ARGV[5], 'op', ARGV[6], 'path', ARGV[7],
           'hash', ARGV[8])
return 1
"""

Extra = Callable[[Any], None]  # adds commands to a pipeline; their replies come back in order

KIND_READ = b"r"
KIND_WRITE = b"w"


@dataclass(frozen=True)
class ReadState:
    """What a session last saw of a file: the hash of the whole file decides; the rest informs."""

    hash: str  # XXH3-128, hex
    mtime_ns: int
    size: int
    offset: int  # 0: from the start (no offset given)
    limit: int  # 0: no limit given
    time: float
    kind: bytes = KIND_READ  # b"r" after a read, b"w" after this session's own write

    def pack(self) -> bytes:
        return _PACK.pack(
            bytes.fromhex(self.hash), self.mtime_ns, self.size, self.offset, self.limit, self.time, self.kind
        )

    @classmethod
    def unpack(cls, raw: bytes) -> ReadState:
        h, mtime_ns, size, offset, limit, t, kind = _PACK.unpack(raw)
        return cls(h.hex(), mtime_ns, size, offset, limit, t, kind)


def path_hash(key: str) -> str:
    return xxhash.xxh3_64_hexdigest(key.encode("utf-8", "surrogateescape"))


def connect(url: str, timeout: float = 2.0) -> redis.Redis:
    """A client with short timeouts and a single immediate reconnect attempt (a restarted server is found
    again at once; a dead one is reported within `timeout`, not after a long back-off)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=min(timeout, 1.0),
        retry=Retry(NoBackoff(), 1),
        health_check_interval=0,
    )


class StateStore:
    """Read state, versions and the session registry for one repository namespace."""

    def __init__(self, client: redis.Redis, namespace: str, ttl_s: int = 86400) -> None:
        self.r = client
        self.ns = namespace
        self.ttl_s = ttl_s
        self.sessions_key = f"ec:{{{namespace}}}:sessions"
        self.refusals_key = f"ec:{{{namespace}}}:refusals"
        self._record_write_script = client.register_script(_RECORD_WRITE_LUA)
        self._registered: dict[str, float] = {}

    # -- keys ---------------------------------------------------------------------------------------------
    def _tag(self, key: str) -> str:
        return f"ec:{{{self.ns}:{path_hash(key)}}}"

    def rs_key(self, session: str, key: str) -> str:
        return f"{self._tag(key)}:rs:{session}"

    def meta_key(self, key: str) -> str:
        return f"{self._tag(key)}:meta"

    # -- calls --------------------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except redis.RedisError as exc:
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                "The coordination state (Redis) could not be reached, so nothing was read or written "
                f"({type(exc).__name__}: {exc}). Wait a moment and try again; after it is back, read the "
                "file again before editing.",
            ) from exc

    def ping(self) -> bool:
        return bool(self._call(self.r.ping))

    def alive(self) -> None:
        """Fail closed without a round trip: check out a pooled connection, which makes redis-py look at the
        socket (a server that went away has closed it, so the socket reads EOF) and reconnect if needed.
        Raises state_unavailable when the server cannot be reached. A silent network partition is not seen
        here; the write's own Redis update then fails, and the session's next edit is refused."""

        def probe() -> None:
            pool = self.r.connection_pool
            conn = pool.get_connection()
            try:
                try:
                    stale = conn.can_read(timeout=0)  # an idle, healthy connection has nothing to read
                except (redis.ConnectionError, OSError):
                    stale = True
                if stale:
                    conn.disconnect()
                    try:
                        conn.connect()
                    except OSError as exc:
                        raise redis.ConnectionError(str(exc)) from exc
            finally:
                pool.release(conn)

        self._call(probe)

    def get(self, session: str, key: str) -> ReadState | None:
        raw = self._call(lambda: self.r.get(self.rs_key(session, key)))
        return _unpack(raw)

    def get_with(self, session: str, key: str, extra: Extra) -> tuple[ReadState | None, list[Any]]:
        """`get`, plus the commands `extra` adds, in one round trip."""

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.get(self.rs_key(session, key))
            extra(pipe)
            return pipe.execute()

        replies = self._call(go)
        return _unpack(replies[0]), replies[1:]

    def run_extra(self, extra: Extra) -> list[Any]:
        """Only the commands `extra` adds, in one round trip."""

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            extra(pipe)
            return pipe.execute()

        return self._call(go)

    def record_read(self, session: str, key: str, rs: ReadState) -> ReadState | None:
        """Store `rs` and return the previous read state, in one round trip (SET ... GET)."""
        return self.record_read_with(session, key, rs, None)[0]

    def record_read_with(
        self, session: str, key: str, rs: ReadState, extra: Extra | None
    ) -> tuple[ReadState | None, list[Any]]:
        """`record_read`, plus the commands `extra` adds, in the same round trip."""

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.set(self.rs_key(session, key), rs.pack(), ex=self.ttl_s, get=True)
            pipe.zadd(self.sessions_key, {session: rs.time})
            if extra is not None:
                extra(pipe)
            return pipe.execute()

        replies = self._call(go)
        return _unpack(replies[0]), replies[2:]

    def record_write(
        self,
        session: str,
        key: str,
        rs: ReadState,
        version: int,
        op: str,
        *,
        digest: str | None = None,
        extra: Extra | None = None,
    ) -> list[Any]:
        """After a write: the writer's read state becomes `rs`; the path's version and content hash (`digest`,
        default `rs.hash`; they differ after a rebased edit, whose read state is the session's own view)
        move on.

        One command (a script over the path's two keys, which share a hash tag), so one round trip; the
        session registry is refreshed in the same pipeline at most every `REGISTER_EVERY_S` per process, and
        `extra` (change event, notice lookups) adds its commands there too. Returns the replies of `extra`.
        """

        def go() -> Any:
            keys = [self.rs_key(session, key), self.meta_key(key)]
            args = [rs.pack(), self.ttl_s, version, session, repr(rs.time), op, key, digest or rs.hash]
            register = self._needs_register(session, rs.time)
            if not register and extra is None:
                self._record_write_script(keys=keys, args=args)
                return []
            # EVALSHA straight into the pipeline: redis-py's pipelined Script would first ask SCRIPT EXISTS,
            # a second round trip on every write. A server that lost the script (restarted) answers
            # NOSCRIPT for that one command; the rest of the pipeline has run, so only the script is redone.
            pipe = self.r.pipeline(transaction=False)
            pipe.evalsha(self._record_write_script.sha, len(keys), *keys, *args)
            if register:
                pipe.zadd(self.sessions_key, {session: rs.time})
            if extra is not None:
                extra(pipe)
            replies = pipe.execute(raise_on_error=False)
            if isinstance(replies[0], redis.exceptions.NoScriptError):
                self._record_write_script(keys=keys, args=args)  # loads it, then runs it
            for reply in replies:
                if isinstance(reply, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
                    raise reply
            if isinstance(replies[0], Exception) and not isinstance(replies[0], redis.exceptions.NoScriptError):
                raise replies[0]
            return replies[2 if register else 1 :]

        return self._call(go)

    def record_removal(self, session: str, key: str, version: int, op: str, extra: Extra | None = None) -> list[Any]:
        """After a write removed the file (undo of a creation): no read state; the path's version moves on."""

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.delete(self.rs_key(session, key))
            pipe.hset(
                self.meta_key(key),
                mapping={
                    "version": version,
                    "writer": session,
                    "time": repr(time.time()),
                    "op": op,
                    "path": key,
                    "hash": "",
                },
            )
            if extra is not None:
                extra(pipe)
            return pipe.execute()[2:]

        return self._call(go)

    def _needs_register(self, session: str, now: float) -> bool:
        last = self._registered.get(session)
        if last is not None and now - last < REGISTER_EVERY_S:
            return False
        if len(self._registered) > 100_000:
            self._registered.clear()
        self._registered[session] = now
        return True

    def forget(self, session: str, key: str) -> None:
        self._call(lambda: self.r.delete(self.rs_key(session, key)))

    def meta(self, key: str) -> dict[str, str]:
        raw = self._call(lambda: self.r.hgetall(self.meta_key(key)))
        return {_s(k): _s(v) for k, v in raw.items()}

    def error_counts(self) -> dict[str, int]:
        """Refusals of writes by code, over every process of this repository (flushed after writes)."""
        raw = self._call(lambda: self.r.hgetall(self.refusals_key))
        return {_s(k): int(v) for k, v in raw.items()}

    def sessions(self, since_s: float | None = None) -> list[tuple[str, float]]:
        lo = "-inf" if since_s is None else time.time() - since_s
        raw = self._call(lambda: self.r.zrangebyscore(self.sessions_key, lo, "+inf", withscores=True))
        return [(_s(m), float(score)) for m, score in raw]


def _unpack(raw: Any) -> ReadState | None:
    if raw is None:
        return None
    try:
        return ReadState.unpack(raw)
    except struct.error:
        return None  # unknown format: treat as never read (fails towards not_read, the safe side)


def _s(v: Any) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
