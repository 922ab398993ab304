"""Redis round trips per HTTP edit.

    python3 scripts/http_roundtrips.py [N] [keys|nokeys]      (STATE_CHECK=always for --state-check always)

The service (one uvicorn worker) runs in this process, in a thread; every send of a command or a pipeline
to Redis is counted (redis-py's AbstractConnection.send_packed_command, and the engine's lane, which writes
its batches on the socket itself: `Lane._send`), and INFO commandstats deltas give the commands. N edits
of one file by one session through HttpClient (with Idempotency-Keys by default).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis.connection
import uvicorn

from coordinator import HttpClient
from coordinator.server import ServerConfig, create_app
from coordinator.state.lane import Lane
from coordinator_bench.harness import scratch

SENDS = [0]
_ORIGINAL = redis.connection.AbstractConnection.send_packed_command


def _counting(self: Any, command: Any, check_health: bool = True) -> None:
    SENDS[0] += 1
    _ORIGINAL(self, command, check_health)


_LANE_SEND = Lane._send


def _lane_counting(self: Lane, conn: Any, data: bytes) -> None:
    SENDS[0] += 1
    _LANE_SEND(self, conn, data)


def _stats(r: redis.Redis) -> dict[str, int]:
    return {k: v["calls"] for k, v in r.info("commandstats").items()}


def main(n: int, keys: bool) -> None:
    redis.connection.AbstractConnection.send_packed_command = _counting  # type: ignore[method-assign]
    Lane._send = _lane_counting  # type: ignore[method-assign]
    with scratch("rt-") as sc:
        measure(sc.root, sc.redis_url(), n, keys)


def measure(root: Path, url: str, n: int, keys: bool) -> None:
    (root / "f.txt").write_text("x 0\n")
    secret = b"s" * 32
    state_check = os.environ.get("STATE_CHECK")  # None: the engine's default
    config = ServerConfig(root=str(root), redis_url=url, durability="none", state_check=state_check)
    server = uvicorn.Server(uvicorn.Config(create_app(config, secret), port=0, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    client = HttpClient(f"http://127.0.0.1:{port}", secret=secret, idempotency_keys=keys)
    r = redis.Redis.from_url(str(url))
    client.read("s", "f.txt")
    for i in range(20):  # warm-up: caches, scripts loaded, connections made
        client.edit("s", "f.txt", f"x {i}", f"x {i + 1}")
    sends, before = SENDS[0], _stats(r)
    for i in range(20, 20 + n):
        client.edit("s", "f.txt", f"x {i}", f"x {i + 1}")
    sends, after = SENDS[0] - sends - 1, _stats(r)  # minus the INFO of the second snapshot
    delta = {k.removeprefix("cmdstat_"): after[k] - before.get(k, 0) for k in after if k != "cmdstat_info"}
    per = {k: round(v / n, 2) for k, v in sorted(delta.items()) if v}
    print(f"state_check={state_check} idempotency keys={keys}: {sends / n:.2f} round trips and "
          f"{sum(delta.values()) / n:.2f} commands per edit {per}")  # fmt: skip
    client.close()
    server.should_exit = True
    thread.join(10)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, not (len(sys.argv) > 2 and sys.argv[2] == "nokeys"))
