"""Idempotency: answers of mutating requests, kept in Redis by (session, Idempotency-Key)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import redis
import xxhash

from coordinator.errors import CoordinatorError
from coordinator.server.common import ServiceError
from coordinator.state import lane as redislane
from coordinator.state.connection import is_cluster, redis_call


class WouldBlock(Exception):
    """Raised on the event-loop thread where a request would have to wait for a duplicate of itself (same
    idempotency key) still running. Nothing has been written when it is raised; the caller runs the whole
    call again in the thread pool, where it waits as usual. (A taken file lock is the engine's `LockBusy`.)"""


_RELEASE_SCRIPT = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class IdempotencyStore:
    """Answers of mutating requests, by (session, Idempotency-Key), in Redis.

    Value layout: b"P" + fingerprint(16) while the first request runs (with a TTL longer than any request
    can take), then b"D" + fingerprint + status (3 digits) + response body (TTL `ttl_s`).
    Invariant: at most one request per (session, key) runs the operation; SET NX decides which.
    """

    def __init__(self, client: redis.Redis, namespace: str, ttl_s: int, wait_s: float) -> None:
        self.r = client
        self.ns = namespace
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.pending_ms = int(max(60.0, 3 * wait_s) * 1000)
        self._release = client.register_script(_RELEASE_SCRIPT)
        # The claim (one SET NX per keyed request) goes on a connection kept in hand, packed by hiredis: no
        # redis-py command or pool checkout per request (state/lane.py; its rules apply, the pool's way
        # included when the lane is busy or fails).
        self._lane = redislane.Lane(client) if not is_cluster(client) and redislane.supported() else None

    def key(self, session: str, idem_key: str) -> str:
        h = xxhash.xxh3_128_hexdigest(f"{session}\x00{idem_key}".encode())
        return f"ec:idem:{{{self.ns}}}:{h}"

    def _call(self, fn: Callable[[], Any]) -> Any:
        # The one Redis-error translator: cluster exceptions (not RedisErrors) included.
        return redis_call(fn)

    def begin(self, k: str, fingerprint: bytes, may_wait: bool = True) -> tuple[int, bytes] | None:
        """None: the caller owns the key and must run the operation. Otherwise the answer to replay.

        A duplicate of a request still running waits for its answer, up to `wait_s`; with `may_wait` false
        it raises WouldBlock instead (it is on the event loop and must not sleep)."""
        pending = b"P" + fingerprint
        deadline = time.monotonic() + self.wait_s
        delay = 0.002
        while True:
            if self._call(lambda: self._claim(k, pending)):
                return None
            raw = self._call(lambda: self.r.get(k))
            if raw is None:
                continue  # the first request gave up its claim: try to take it
            if raw[1:17] != fingerprint:
                raise ServiceError(
                    "idempotency_key_reused",
                    "This Idempotency-Key was already used for a different request. Use a new key for "
                    "each distinct call, and the same key only to retry the same call.",
                )
            if raw[:1] == b"D":
                return int(raw[17:20]), bytes(raw[20:])
            if not may_wait:
                raise WouldBlock
            if time.monotonic() >= deadline:
                raise ServiceError(
                    "request_in_progress",
                    "A request with this Idempotency-Key is still being processed. Retry the same call "
                    "with the same key in a moment to get its answer.",
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _claim(self, k: str, pending: bytes) -> bool:
        """SET k pending NX PX: whether this request took the key (raises what redis-py raises)."""
        lane = self._lane
        if lane is None:
            return bool(self.r.set(k, pending, nx=True, px=self.pending_ms))
        batch = redislane.Batch()
        batch.execute_command("SET", k, pending, "NX", "PX", self.pending_ms)
        replies = lane.start(batch, lambda: list(batch.replay(self.r.pipeline(transaction=False)).execute()))()
        return replies[0] is not None and replies[0] is not False  # b"OK" on the lane, True by the pool's way

    def close(self) -> None:
        """Hand the lane's connection back (the client's pool is its owner's to close)."""
        if self._lane is not None:
            self._lane.close()

    def finish(self, k: str, fingerprint: bytes, status: int, body: bytes) -> None:
        self._call(lambda: self.queue_finish(self.r, k, fingerprint, status, body))

    def queue_finish(self, pipe: Any, k: str, fingerprint: bytes, status: int, body: bytes) -> Any:
        """The command that keeps the answer, on `pipe` (a pipeline, or the client itself)."""
        return pipe.set(k, b"D" + fingerprint + b"%03d" % status + body, ex=self.ttl_s)

    def release(self, k: str, fingerprint: bytes) -> None:
        with contextlib.suppress(CoordinatorError):
            self._call(lambda: self._release(keys=[k], args=[b"P" + fingerprint]))


class RecordOnWrite:
    """A post-write hook (coordinator.engine.PostWriteHook): the answer of a write that landed is kept on the
    engine's own post-write round trip, so an idempotent write costs no extra round trip to finish.

    The answer kept is the result as the engine hands it to the hook: without the notice, which comes from
    that same round trip (a replay tells no notice; notices are told once anyway).
    """

    def __init__(self, store: IdempotencyStore, k: str, fingerprint: bytes, encode: Callable[[Any], bytes]) -> None:
        self.store = store
        self.k = k
        self.fingerprint = fingerprint
        self.encode = encode
        self.recorded = False

    def queue(self, pipe: Any, result: Any) -> None:
        self.store.queue_finish(pipe, self.k, self.fingerprint, 200, self.encode(result))

    def done(self, replies: list[Any] | None) -> None:
        self.recorded = replies is not None and len(replies) > 0 and not isinstance(replies[0], Exception)
