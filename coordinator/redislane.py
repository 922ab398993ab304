"""`Lane`: one pooled Redis connection kept checked out for a store's pipelines, used by whichever thread
finds it free.

Why: redis-py's `Pipeline.execute` checks a connection out of the pool and back in, wraps the call in its
retry policy and records observability figures, per call. Measured on the embedded server (redis-py 8.1,
hiredis): a three-command pipeline like the engine's post-write one took 140 us that way against 65-80 us
sent on a connection already in hand; in the engine's solo edit loop the lane saved 10-40 us on the
record and halved the liveness probe before the lock (40 -> 20 us). The lane sends the queued commands on its own connection with the pipeline's own packing
and reply parsing (`Pipeline._execute_pipeline`, every redis-py release from 6.1 on has it), and nothing
else.

Rules, each enforced here:
1. One thread at a time: a non-blocking lock; a thread that finds the lane busy takes the pool's path
   (`pipe.execute()`), so the lane never makes anyone wait.
2. Any failure on the lane's connection (the server went away, a timeout, a Sentinel primary that became a
   replica, which redis-py reports as a ConnectionError) drops the connection (disconnected, handed back
   to the pool) and the pipeline is sent again the pool's way, with redis-py's retries: the same commands
   the pool's path would have re-sent after the same failure.
3. Never across a fork: a connection checked out by another process is forgotten, not used or closed.
4. Standalone servers and Sentinel primaries only; a cluster routes each key to its node (no lane).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis

#: Failures after which the lane's connection is dropped and the pool's path is taken.
_LANE_FAILURES: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError)


class Lane:
    """See the module docstring."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pid = 0

    def execute(self, pipe: Any) -> list[Any]:
        """The replies of the commands queued on `pipe` (a non-transactional redis-py pipeline)."""
        if not self._lock.acquire(blocking=False):
            return list(pipe.execute())
        try:
            conn = self._connection()
            try:
                return list(pipe._execute_pipeline(conn, pipe.command_stack, True))
            except _LANE_FAILURES:
                self._drop()
        finally:
            self._lock.release()
        return list(pipe.execute())

    def probe(self) -> bool:
        """Whether the lane's connection looks healthy without a round trip (a server that went away has
        closed it: the socket reads EOF); a stale one is dropped. False when the lane is busy or has no
        connection yet: the caller probes the pool's way."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._conn is None or self._pid != os.getpid():
                return False
            try:
                stale = self._conn.can_read(timeout=0)  # an idle, healthy connection has nothing to read
            except _LANE_FAILURES:
                stale = True
            if stale:
                self._drop()
                return False
            return True
        finally:
            self._lock.release()

    def _connection(self) -> Any:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        self._conn = self._pool.get_connection()  # (after a fork, the parent's is forgotten: rule 3)
        self._pid = os.getpid()
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.disconnect()
        finally:
            self._pool.release(conn)

    def close(self) -> None:
        """Hand the connection back to the pool (the owner closes the pool itself)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._drop()
            self._conn = None
