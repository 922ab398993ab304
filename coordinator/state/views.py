"""Read state in Redis: what each session last saw of each file.

Redis holds coordination state that is safe to lose: a session whose read state is gone reads again. It
never decides alone whether a write is safe; the engine decides that against the bytes on disk, under the
file lock. Every Redis failure becomes `state_unavailable` (coordinator.state.connection, the one translator), so
callers fail closed.

Key schema (every key of one operation shares a `{...}` hash tag, so it lives in one cluster slot):
    ec:{<n>:<p>}:r:<session>             packed ReadState, with a TTL (default 24 h)
    ec:{<n>:<p>}:meta                    hash: version, writer, time, op, path, hash (content after the write)
    (<n>, <p>: the XXH3-64 of the namespace and of the path, 11 characters of URL-safe base64 each)
    ec:{<ns>:sessions:<k>}:s             sorted set, one of SHARDS: session id -> last activity (unix time);
                                         k is a hash of the session id
    ec:{<ns>:refusals:<k>}:n             hash, one of SHARDS: refusals by code; k is chosen per process
    ec:{<ns>}:epoch                      "<id>|<created unix time>|<1: created after lost state>" (no TTL)
Leases (leases.py) and change events (events.py) have their own keys under `ec:{<ns>}:`; the calls here take
an `extra` callback that adds their commands to the same pipeline, so they ride on a round trip that is
made anyway.

Decision: the per-path tag is short, and so is a whole-file view's value, because read state is the one
thing Redis holds per (session, file): 10,000 sessions x 100 files is a million keys; this layout costs a
sixth less memory per entry than hex hashes with the 32-character namespace did (BENCHMARKS.md, "Figures
behind design choices"). An 11-character tag keeps a key of up to 44 characters (a session id of up to 13)
in the allocator's 48-byte class, and a 41-byte value is stored with its object header in one allocation
(Redis embeds strings of up to 44 bytes).
Keys of the earlier hex layout are not read; they expire with their TTL, so a session whose view was
recorded under one reads again (the safe side).

No hot key per repository on the edit path: a read or a write touches its path's keys; the session registry
is refreshed at most every `REGISTER_EVERY_S` per session and process, in one of `SHARDS` sorted sets; the
refusal counters are spread over `SHARDS` hashes (each process adds to its own). Keys of older versions
(`ec:{<ns>}:sessions`, `ec:{<ns>}:refusals`) are still read by the listings.

No server-side scripts: the write record is two plain commands on one slot (SET, HSET) in the pipeline, so
the same code runs on one server, behind Sentinel and on a Redis Cluster (redis-py blocks EVALSHA inside
cluster pipelines). They need not be atomic: a reader that sees one without the other only reads again.

`ns` names the repository; the engine takes it from the state folder (a repository id, see layout.py), so
one Redis serves many roots and a checkout keeps its state wherever it is mounted.
"""

from __future__ import annotations

import base64
import functools
import os
import random
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import xxhash

from coordinator.clock import time_text
from coordinator.frozen import fast_init
from coordinator.hashing import path_hash
from coordinator.state import connection, lane
from coordinator.state import events as events_mod
from coordinator.state.connection import redis_call
from coordinator.state.lane import Batch, Lane, template

T = TypeVar("T")

# hash (16 bytes) | mtime_ns | size | offset | limit | time | kind; a whole-file view (offset and limit 0)
# leaves out offset and limit (41 bytes, short enough for one of Redis's embedded strings)
_PACK = struct.Struct("<16sqqiidc")
_PACK_WHOLE = struct.Struct("<16sqqdc")
REGISTER_EVERY_S = 10.0
SHARDS = 16

Extra = Callable[[Any], None]  # adds commands to a pipeline; their replies come back in order
#: A write's change event besides what its record says (events.queue_event): namespace, changed lines, time,
#: rebased.
WriteEvent = tuple[str, Sequence[tuple[int, int]], float, bool]

KIND_READ = b"r"
KIND_WRITE = b"w"


@fast_init
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
        digest = bytes.fromhex(self.hash)
        if self.offset == 0 and self.limit == 0:
            return _PACK_WHOLE.pack(digest, self.mtime_ns, self.size, self.time, self.kind)
        return _PACK.pack(digest, self.mtime_ns, self.size, self.offset, self.limit, self.time, self.kind)

    @classmethod
    def unpack(cls, raw: bytes) -> ReadState:
        """Either packing (told apart by length); raises struct.error on any other length."""
        if len(raw) == _PACK_WHOLE.size:
            h, mtime_ns, size, t, kind = _PACK_WHOLE.unpack(raw)
            return cls(h.hex(), mtime_ns, size, 0, 0, t, kind)
        h, mtime_ns, size, offset, limit, t, kind = _PACK.unpack(raw)
        return cls(h.hex(), mtime_ns, size, offset, limit, t, kind)


@dataclass(frozen=True)
class Epoch:
    """The generation of a namespace's coordination state in Redis.

    Created once per server lifetime (the key has no TTL); `reset` is true when it was created while the
    state folder remembered an earlier epoch, i.e. Redis lost the earlier state (flushed, or a new server)."""

    id: str
    created: float
    reset: bool

    def encode(self) -> str:
        return f"{self.id}|{self.created!r}|{1 if self.reset else 0}"

    @classmethod
    def decode(cls, raw: Any) -> Epoch | None:
        try:
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            eid, created, reset = text.split("|")
            return cls(eid, float(created), reset == "1")
        except (ValueError, AttributeError, UnicodeDecodeError):
            return None


@functools.lru_cache(maxsize=1024)
def short_hash(text: str) -> str:
    """XXH3-64 of `text` in 11 characters of URL-safe base64 (no padding): the parts of a per-path tag
    (memoized: a record names its path's tag twice, and an agent edits the same few paths; at most 1,024
    paths of at most 4,096 characters are kept, so hostile paths cannot grow it past a few MB)."""
    return base64.urlsafe_b64encode(xxhash.xxh3_64_digest(text.encode("utf-8", "surrogateescape")))[:11].decode()


def connect(url: str, timeout: float = 2.0) -> Any:
    """A client for any supported Redis URL (see coordinator.state.connection.connect)."""
    return connection.connect(url, timeout=timeout)


_TAGS_KEPT = 4096  # paths whose hash tag is kept (a cache: cleared when full)


class StateStore:
    """Read state, versions and the session registry for one repository namespace.

    epoch_file: where the state folder remembers the epoch it last saw (None: no reset detection).
    """

    def __init__(self, client: Any, namespace: str, ttl_s: int = 86400, epoch_file: Path | None = None) -> None:
        self.r = client
        self.ns = namespace
        self.ttl_s = ttl_s
        self.cluster = connection.is_cluster(client)
        # The engine's post-write pipelines and liveness probes go on a connection kept in hand (lane.py).
        self._lane: Lane | None = Lane(client) if not self.cluster and lane.supported() else None
        # The single registry key of older versions: still read by the listings (so writers that use it
        # keep working), no longer written by the engine.
        self.sessions_key = f"ec:{{{namespace}}}:sessions"
        self.legacy_refusals_key = f"ec:{{{namespace}}}:refusals"
        # This process's refusal counter shard (the engine adds to it in its post-write pipeline).
        self.refusals_key = self._refusals_shard(random.randrange(SHARDS))
        self.epoch_key = f"ec:{{{namespace}}}:epoch"
        self.epoch_file = epoch_file
        self._ns_tag = short_hash(namespace)
        self._epoch_synced = False
        self._registered: dict[str, float] = {}
        self._tags: dict[str, str] = {}  # path -> its keys' hash tag (a pure function of the two names)
        self._record_templates: dict[tuple[str, str], tuple[bytes, str, str]] = {}  # see `_record_template`
        self._record_event_templates: dict[tuple[str, str, str], tuple[bytes, str, str]] = {}  # and with the XADD

    # -- keys ---------------------------------------------------------------------------------------------
    def _tag(self, key: str) -> str:
        tag = self._tags.get(key)
        if tag is None:
            if len(self._tags) >= _TAGS_KEPT:
                self._tags.clear()
            tag = self._tags[key] = f"ec:{{{self._ns_tag}:{short_hash(key)}}}"
        return tag

    def rs_key(self, session: str, key: str) -> str:
        return f"{self._tag(key)}:r:{session}"

    def meta_key(self, key: str) -> str:
        return f"{self._tag(key)}:meta"

    def session_key(self, session: str) -> str:
        """The registry shard of `session`."""
        return f"ec:{{{self.ns}:sessions:{int(path_hash(session), 16) % SHARDS}}}:s"

    def _refusals_shard(self, k: int) -> str:
        return f"ec:{{{self.ns}:refusals:{k}}}:n"

    # -- calls --------------------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        return redis_call(fn)

    def _pipe(self) -> Any:
        return self.r.pipeline(transaction=False)

    def _send(self, pipe: Any) -> list[Any]:
        """A pipeline's replies, on the lane when there is one (see lane.py)."""
        return self._lane.execute(pipe) if self._lane is not None else list(pipe.execute())

    def close(self) -> None:
        """Hand the lane's connection back to the pool (the client itself is closed by its owner)."""
        if self._lane is not None:
            self._lane.close()

    def ping(self) -> bool:
        return bool(self._call(self.r.ping))

    def alive(self) -> None:
        """Fail closed without a round trip: check out a pooled connection, which makes redis-py look at the
        socket (a server that went away has closed it, so the socket reads EOF) and reconnect if needed.
        Raises state_unavailable when the server cannot be reached. A silent network partition is not seen
        here; the write's own Redis update then fails, and the session's next edit is refused. On a Redis
        Cluster (connections per node) this is a real round trip to the node of the epoch key."""
        if self.cluster:
            self._call(lambda: self.r.exists(self.epoch_key))
            return
        if self._lane is not None and self._lane.probe():
            return
        self._call(self._probe_pool)

    def _probe_pool(self) -> None:
        pool = self.r.connection_pool
        conn = pool.get_connection()
        try:
            try:
                stale = conn.can_read(timeout=0)  # an idle, healthy connection has nothing to read
            except connection.CLIENT_ERRORS:
                stale = True
            if stale:
                conn.disconnect()
                conn.connect()
        finally:
            pool.release(conn)

    def get(self, session: str, key: str) -> ReadState | None:
        raw = self._call(lambda: self.r.get(self.rs_key(session, key)))
        return _unpack(raw)

    def get_with(self, session: str, key: str, extra: Extra) -> tuple[ReadState | None, list[Any]]:
        """`get`, plus the commands `extra` adds, in one round trip."""

        def go() -> Any:
            pipe = self._pipe()
            pipe.get(self.rs_key(session, key))
            extra(pipe)
            return pipe.execute()

        replies = self._call(go)
        return _unpack(replies[0]), replies[1:]

    def queue_heads(self, pipe: Any, keys: Sequence[str]) -> None:
        """Queue one HMGET(hash, writer) per path: its content hash after the last write and who made it,
        the replies `events.ReadTracker.notice` reads (the notice lookups, on a pipeline made anyway)."""
        for key in keys:
            pipe.hmget(self.meta_key(key), "hash", "writer")

    def run_extra(self, extra: Extra) -> list[Any]:
        """Only the commands `extra` adds, in one round trip."""

        def go() -> Any:
            pipe = self._pipe()
            extra(pipe)
            return pipe.execute()

        return self._call(go)

    def record_read(self, session: str, key: str, rs: ReadState) -> ReadState | None:
        """Store `rs` and return the previous read state, in one round trip (SET ... GET)."""
        return self.record_read_with(session, key, rs, None)[0]

    def record_read_with(
        self, session: str, key: str, rs: ReadState, extra: Extra | None
    ) -> tuple[ReadState | None, list[Any]]:
        """`record_read`, plus the commands `extra` adds, in the same round trip (the session registry and,
        once per process, the epoch ride along)."""
        register = self._needs_register(session, rs.time)
        sync_epoch = not self._epoch_synced

        def go() -> Any:
            pipe = self._pipe()
            pipe.set(self.rs_key(session, key), rs.pack(), ex=self.ttl_s, get=True)
            if register:
                pipe.zadd(self.session_key(session), {session: rs.time})
            if sync_epoch:
                pipe.get(self.epoch_key)
            if extra is not None:
                extra(pipe)
            return pipe.execute()

        replies = self._call(go)
        skip = 1 + register + sync_epoch
        if sync_epoch:
            self._sync_epoch(replies[skip - 1])
        return _unpack(replies[0]), replies[skip:]

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

        Two commands on the path's slot (SET, HSET) in one pipeline, so one round trip; the session registry
        is refreshed in the same pipeline at most every `REGISTER_EVERY_S` per process, and `extra` (change
        event, notice lookups) adds its commands there too. Returns the replies of `extra`.
        """
        register = self._needs_register(session, rs.time)

        def go() -> Any:
            pipe = self._pipe()
            self._queue_record(pipe, session, key, rs, version, op, digest, register)
            if extra is not None:
                extra(pipe)
            return self._send(pipe)

        replies: list[Any] = self._call(go)
        return replies[2 + register :]

    def start_record_write(
        self,
        session: str,
        key: str,
        rs: ReadState,
        version: int,
        op: str,
        digest: str | None,
        extra: Extra | None,
        event: WriteEvent | None = None,
        before_event: Extra | None = None,
    ) -> Callable[[], list[Any]]:
        """`record_write` for a caller with work to do before it needs the replies: the commands are sent
        now (lane.py's `start`); the returned function waits for the replies and gives those after the
        record's own (raw, as the server sent them: a caller reads them in either form), or raises
        state_unavailable (or a refused command's error) as `record_write` would. Call it once.

        In order: the record's SET, HSET (and ZADD when due), `before_event`'s commands, the change event's
        XADD when `event` (namespace, changed lines, time, rebased) is given (events.queue_event, of the
        same path, session, version, operation and content hash), then `extra`'s. The record and the
        event alone (the usual write) are packed from one kept template (`_record_event_template`)."""
        batch = Batch()
        register = self._needs_register(session, rs.time)
        if event is not None and not register and before_event is None:
            self._queue_record_and_event(batch, session, key, rs, version, op, digest, event)
        else:
            self._queue_record(batch, session, key, rs, version, op, digest, register)
            if before_event is not None:
                before_event(batch)
            if event is not None:
                events_mod.queue_event(batch, event[0], path=key, session=session, version=version, operation=op,
                                       ranges=event[1], when=event[2], digest=digest, rebased=event[3])  # fmt: skip
        if extra is not None:
            extra(batch)
        return self._start(batch, 2 + register)

    def _start(self, batch: Batch, skip: int) -> Callable[[], list[Any]]:
        """`batch` sent on the lane (`start_record_write`), and what gives its replies after the first `skip`."""
        lane = self._lane

        def pooled() -> list[Any]:
            return list(batch.replay(self._pipe()).execute())

        if lane is None:
            replies = self._call(pooled)
            return lambda: replies[skip:]
        try:
            finish = lane.start(batch, pooled)
        except connection.CLIENT_ERRORS as exc:  # (as `_call` translates)
            raise connection.translate(exc) from exc

        def replies_after() -> list[Any]:
            try:
                return finish()[skip:]
            except connection.CLIENT_ERRORS as exc:
                raise connection.translate(exc) from exc

        return replies_after

    def _queue_record_and_event(
        self, batch: Batch, session: str, key: str, rs: ReadState, version: int, op: str, digest: str | None,
        event: WriteEvent,
    ) -> None:  # fmt: skip
        """The record's SET and HSET and the event's XADD (`_queue_record`, then events.queue_event: the same
        commands and bytes), packed from one kept template: the version, operation and hash packed once."""
        namespace, ranges, when, rebased = event
        wire, rs_key, meta_key = self._record_event_template(session, key, namespace)
        view, at, head, ev_head = rs.pack(), time_text(rs.time), digest or rs.hash, digest or ""
        ev_at = at if when == rs.time else time_text(when)  # the usual write: one time, its text made once
        # (events.ranges_text, its usual case inline)
        span = f"{ranges[0][0]}-{ranges[0][1]}" if len(ranges) == 1 else events_mod.ranges_text(ranges)
        v, w, o, h, r = b"%d" % version, at.encode(), op.encode(), head.encode(), span.encode()
        t = w if ev_at == at else ev_at.encode()
        eh = h if ev_head == head else ev_head.encode()
        flag, f = ("1", b"1") if rebased else ("0", b"0")
        batch.add_packed(
            wire % (len(view), view, len(v), v, len(w), w, len(o), o, len(h), h,
                    len(v), v, len(o), o, len(r), r, len(t), t, len(eh), eh, f),
            3, self._record_event_commands,
            rs_key, meta_key, session, key, view, version, at, op, head, namespace, span, ev_at, ev_head, flag,
        )  # fmt: skip

    def _record_event_commands(
        self, rs_key: str, meta_key: str, session: str, key: str, view: bytes, version: int, at: str, op: str,
        head: str, namespace: str, span: str, ev_at: str, ev_head: str, flag: str,
    ) -> list[tuple[Any, ...]]:  # fmt: skip
        """The raw arguments of what `_queue_record_and_event` packs."""
        return [
            *self._record_commands(rs_key, meta_key, session, key, view, version, at, op, head),
            *events_mod.xadd_commands(namespace, key, session, version, op, span, ev_at, ev_head, flag),
        ]

    def _record_event_template(self, session: str, key: str, namespace: str) -> tuple[bytes, str, str]:
        """`_record_template`'s SET and HSET with the event's XADD after them (events.xadd_template; its
        rebased flag, always one byte, as `$1` and a slot), kept the same way."""
        got = self._record_event_templates.get((session, key, namespace))
        if got is None:
            wire, rs_key, meta_key = self._record_template(session, key)
            xadd = events_mod.xadd_template(namespace, key, session)
            assert xadd.endswith(b"$%d\r\n%b\r\n")
            wire += xadd[: -len(b"$%d\r\n%b\r\n")] + b"$1\r\n%b\r\n"
            if len(self._record_event_templates) > 100_000:
                self._record_event_templates.clear()
            got = self._record_event_templates[(session, key, namespace)] = (wire, rs_key, meta_key)
        return got

    def _queue_record(
        self,
        pipe: Any,
        session: str,
        key: str,
        rs: ReadState,
        version: int,
        op: str,
        digest: str | None,
        register: bool,
    ) -> None:
        """The record's own commands: the writer's view (SET), the path's head (HSET), the registry (ZADD).
        Raw commands (`pipe` is a redis-py pipeline or a lane.py `Batch`); on a `Batch`, SET and HSET are
        packed from the path's kept template (`_record_template`): only the view, version, time, operation
        and hash are packed per write, into the same bytes hiredis would make."""
        if type(pipe) is Batch:
            wire, rs_key, meta_key = self._record_template(session, key)
            view, when, head = rs.pack(), time_text(rs.time), digest or rs.hash
            v, w, o, h = b"%d" % version, when.encode(), op.encode(), head.encode()
            pipe.add_packed(
                wire % (len(view), view, len(v), v, len(w), w, len(o), o, len(h), h),
                2, self._record_commands, rs_key, meta_key, session, key, view, version, when, op, head,
            )  # fmt: skip
        else:
            pipe.execute_command("SET", self.rs_key(session, key), rs.pack(), "EX", self.ttl_s)
            self._queue_head(pipe, session, key, version, op, rs.time, digest or rs.hash)
        if register:
            pipe.execute_command("ZADD", self.session_key(session), rs.time, session)

    def _record_commands(
        self,
        rs_key: str,
        meta_key: str,
        session: str,
        key: str,
        view: bytes,
        version: int,
        when: str,
        op: str,
        head: str,
    ) -> list[tuple[Any, ...]]:
        """The raw arguments of the record's SET and HSET packed from `_record_template`."""
        return [
            ("SET", rs_key, view, "EX", self.ttl_s),
            ("HSET", meta_key, "version", version, "writer", session, "time", when, "op", op, "path", key, "hash",
             head),
        ]  # fmt: skip

    def _record_template(self, session: str, key: str) -> tuple[bytes, str, str]:
        """The record's SET and HSET for `session` writing `key`, packed once and kept (lane.template),
        with the view's and the head's keys. Bounded like the registry's memo."""
        got = self._record_templates.get((session, key))
        if got is None:
            rs_key, meta_key = self.rs_key(session, key), self.meta_key(key)
            wire = template("SET", rs_key, None, "EX", self.ttl_s) + template(
                "HSET", meta_key, "version", None, "writer", session, "time", None, "op", None, "path", key,
                "hash", None,
            )  # fmt: skip
            if len(self._record_templates) > 100_000:
                self._record_templates.clear()
            got = self._record_templates[(session, key)] = (wire, rs_key, meta_key)
        return got

    def _queue_head(self, pipe: Any, session: str, key: str, version: int, op: str, when: float, digest: str) -> None:
        """The path's head (HSET of its meta key): the version, who wrote it when, how, and the content hash
        it left ("" when the write removed the file). One raw command, for a pipeline or a `Batch`."""
        head = ("version", version, "writer", session, "time", time_text(when), "op", op, "path", key, "hash", digest)
        pipe.execute_command("HSET", self.meta_key(key), *head)

    def record_removal(self, session: str, key: str, version: int, op: str, extra: Extra | None = None) -> list[Any]:
        """After a write removed the file (undo of a creation): no read state; the path's version moves on."""

        def go() -> Any:
            pipe = self._pipe()
            pipe.delete(self.rs_key(session, key))
            self._queue_head(pipe, session, key, version, op, time.time(), "")
            if extra is not None:
                extra(pipe)
            return self._send(pipe)[2:]

        return self._call(go)

    def record_head(
        self, session: str, key: str, version: int, op: str, digest: str | None, extra: Extra | None = None
    ) -> list[Any]:
        """A version of `key` written by `session` without giving it a view of the result (a write the
        coordinator found rather than made, or a repair): only the path's head moves on."""

        def go() -> Any:
            pipe = self._pipe()
            self._queue_head(pipe, session, key, version, op, time.time(), digest or "")
            if extra is not None:
                extra(pipe)
            return self._send(pipe)[1:]

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

        def go() -> Any:
            pipe = self._pipe()
            for k in range(SHARDS):
                pipe.hgetall(self._refusals_shard(k))
            pipe.hgetall(self.legacy_refusals_key)
            return pipe.execute()

        out: dict[str, int] = {}
        for raw in self._call(go):
            for k, v in raw.items():
                out[_s(k)] = out.get(_s(k), 0) + int(v)
        return out

    def sessions(self, since_s: float | None = None) -> list[tuple[str, float]]:
        """Sessions seen (at most `REGISTER_EVERY_S` late), oldest activity first."""
        lo = "-inf" if since_s is None else time.time() - since_s

        def go() -> Any:
            pipe = self._pipe()
            for k in range(SHARDS):
                pipe.zrangebyscore(f"ec:{{{self.ns}:sessions:{k}}}:s", lo, "+inf", withscores=True)
            pipe.zrangebyscore(self.sessions_key, lo, "+inf", withscores=True)
            return pipe.execute()

        best: dict[str, float] = {}
        for raw in self._call(go):
            for m, score in raw:
                name = _s(m)
                best[name] = max(best.get(name, 0.0), float(score))
        return sorted(best.items(), key=lambda kv: kv[1])

    def register(self, session: str, when: float | None = None) -> None:
        """Put `session` in the registry now (e.g. an MCP server announcing its session)."""
        t = time.time() if when is None else when
        self._call(lambda: self.r.zadd(self.session_key(session), {session: t}))
        self._registered[session] = t

    def last_seen(self, session: str) -> float | None:
        """When `session` was last registered (None: never, or its registry entry is gone)."""

        def go() -> Any:
            pipe = self._pipe()
            pipe.zscore(self.session_key(session), session)
            pipe.zscore(self.sessions_key, session)
            return pipe.execute()

        scores = [float(x) for x in self._call(go) if x is not None]
        return max(scores) if scores else None

    # -- epoch: was the coordination state lost? ---------------------------------------------------------
    def epoch(self) -> Epoch:
        """The current epoch, created if Redis has none (one or two round trips; used on refusal paths)."""
        return self._sync_epoch(self._call(lambda: self.r.get(self.epoch_key)))

    def _sync_epoch(self, raw: Any) -> Epoch:
        current = Epoch.decode(raw) if raw is not None else None
        if current is None:
            known = self._remembered_epoch()
            fresh = Epoch(uuid.uuid4().hex[:16], round(time.time(), 3), known is not None)
            won = self._call(lambda: self.r.set(self.epoch_key, fresh.encode(), nx=True))
            current = fresh if won else Epoch.decode(self._call(lambda: self.r.get(self.epoch_key))) or fresh
        if self._remembered_epoch() != current.id:
            self._remember_epoch(current.id)
        self._epoch_synced = True
        return current

    def _remembered_epoch(self) -> str | None:
        if self.epoch_file is None:
            return None
        try:
            return self.epoch_file.read_text(encoding="ascii").strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def _remember_epoch(self, eid: str) -> None:
        if self.epoch_file is None:
            return
        tmp = self.epoch_file.with_name(f".{self.epoch_file.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(eid + "\n", encoding="ascii")
            os.replace(tmp, self.epoch_file)
        except OSError:
            pass  # best effort: without it a later reset is reported as a plain not_read


def reset_note(epoch: Epoch | None) -> str:
    """The sentence a `not_read` carries when the coordination state was reset ("" otherwise)."""
    if epoch is None or not epoch.reset:
        return ""
    when = time.strftime("%H:%M:%S", time.localtime(epoch.created))
    return (
        f" The coordination state was reset at {when} (the Redis server lost its data: restarted without it, "
        "replaced or flushed), so reads made before then are no longer known; read the file again, then redo "
        "the change."
    )


def _unpack(raw: Any) -> ReadState | None:
    if raw is None:
        return None
    try:
        return ReadState.unpack(raw)
    except struct.error:
        return None  # unknown format: treat as never read (fails towards not_read, the safe side)


def _s(v: Any) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
