"""Idempotency: answers of mutating requests, kept in Redis by (session, Idempotency-Key)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import redis
import xxhash

from coordinator.errors import CoordinatorError
from coordinator.server.common import ServiceError
from coordinator.state import lane
from coordinator.state.connection import is_cluster, redis_call
from coordinator.state.lane import Batch

log = logging.getLogger("edit_coordinator.server")


def _nothing() -> None:
    return None


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
        self._lane = lane.Lane(client) if not is_cluster(client) and lane.supported() else None

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
        reply = self._on_lane("SET", k, pending, "NX", "PX", self.pending_ms)
        return reply is not None and reply is not False  # b"OK" on the lane, True by the pool's way

    def close(self) -> None:
        """Hand the lane's connection back (the client's pool is its owner's to close)."""
        if self._lane is not None:
            self._lane.close()

    def finish(self, k: str, fingerprint: bytes, status: int, body: bytes) -> None:
        """Keep the answer for replays (on the lane, as the claim)."""
        value = b"D" + fingerprint + b"%03d" % status + body
        if self._lane is None:
            self._call(lambda: self.r.set(k, value, ex=self.ttl_s))
            return
        self._call(lambda: self._on_lane("SET", k, value, "EX", self.ttl_s))

    def finish_soon(self, k: str, fingerprint: bytes, status: int, body: bytes) -> Callable[[], None]:
        """Send the command that keeps the answer now, and return what reads its reply (call it once, soon:
        the lane is this caller's until then). The answer need not wait for that reply: a duplicate
        arriving meanwhile finds the claim pending and waits for the kept answer, as it would for any
        request still running. A failure to keep it is logged (the change stands; a retry with this key
        waits for the pending claim to expire), as `finish` failing is."""
        value = b"D" + fingerprint + b"%03d" % status + body
        lane = self._lane
        try:
            if lane is None:
                self._call(lambda: self.r.set(k, value, ex=self.ttl_s))
                return _nothing
            batch = Batch()
            batch.execute_command("SET", k, value, "EX", self.ttl_s)
            fallback = lambda: list(batch.replay(self.r.pipeline(transaction=False)).execute())  # noqa: E731
            reply = self._call(lambda: lane.start(batch, fallback))
        except Exception:  # never an error answer for a call that ran: the change stands (invariant 3)
            log.warning("could not keep the answer of an idempotent request", exc_info=True)
            return _nothing

        def read() -> None:
            try:
                self._call(reply)
            except Exception:
                log.warning("could not keep the answer of an idempotent request", exc_info=True)

        return read

    def _on_lane(self, *command: Any) -> Any:
        """One command on the lane (the pool's way when it is busy or fails); its reply."""
        lane = self._lane
        assert lane is not None
        batch = Batch()
        batch.execute_command(*command)
        return lane.start(batch, lambda: list(batch.replay(self.r.pipeline(transaction=False)).execute()))()[0]

    def release(self, k: str, fingerprint: bytes) -> None:
        with contextlib.suppress(CoordinatorError):
            self._call(lambda: self._release(keys=[k], args=[b"P" + fingerprint]))
