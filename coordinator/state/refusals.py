"""Refusals by file, for the dashboard: which files waste the agents' turns, and with which codes.

The engine already counts refusals of writes by code over every process (`StateStore.error_counts`); it
does not know which file a refusal was about once the answer has left. The HTTP service records that here,
for the file calls it answers:
    ec:{<ns>}:refusals:by-file    sorted set, member "<code> <path>", score: how many; at most
                                  MAX_FILE_CODES members (a full set drops its lowest counts)
    ec:{<ns>}:refusals:recent     list of JSON {time, session, operation, code, path}, newest first, at most
                                  MAX_RECENT entries
Both expire TTL_S after the last refusal. One pipeline of four commands per refusal on one slot (the
`{<ns>}` tag), so it runs alike on one server, behind Sentinel and on a Cluster.

Decision: Redis, not a count in each worker's memory, because `serve` runs several workers and a
dashboard's request may reach any of them; bounded, because paths come from callers. Refusals of callers
that use the library directly (not through the service) are counted by code only, by the engine, and
those counts reach Redis with each process's next write; the ones here are there when the answer leaves.
"""

from __future__ import annotations

import json
import time
from typing import Any

from coordinator.state.connection import redis_call

MAX_FILE_CODES = 500
MAX_RECENT = 200
TTL_S = 7 * 24 * 3600


class FileRefusals:
    """The per-file refusal tally of one repository (namespace `ns`) in Redis."""

    def __init__(self, client: Any, ns: str) -> None:
        self.r = client
        self.by_file_key = f"ec:{{{ns}}}:refusals:by-file"
        self.recent_key = f"ec:{{{ns}}}:refusals:recent"

    def record(self, code: str, path: str, session: str, operation: str, when: float | None = None) -> None:
        """Count one refusal of `operation` on `path` (a key relative to the root). Raises state_unavailable
        when Redis cannot be reached (the caller decides whether that matters: for the service it does not)."""
        entry = {"time": when or time.time(), "session": session, "operation": operation, "code": code, "path": path}

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.zincrby(self.by_file_key, 1, f"{code} {path}")
            pipe.zremrangebyrank(self.by_file_key, 0, -(MAX_FILE_CODES + 1))
            pipe.lpush(self.recent_key, json.dumps(entry, separators=(",", ":")))
            pipe.ltrim(self.recent_key, 0, MAX_RECENT - 1)
            pipe.expire(self.by_file_key, TTL_S)
            pipe.expire(self.recent_key, TTL_S)
            return pipe.execute()

        redis_call(go)

    def snapshot(self, files: int = 50, recent: int = 50) -> dict[str, Any]:
        """{"by_file": [{path, code, count}] most refused first (at most `files`), "by_code_here": {code:
        count} over every file kept, "recent": [entries] newest first}."""

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.zrevrange(self.by_file_key, 0, -1, withscores=True)
            pipe.lrange(self.recent_key, 0, recent - 1)
            return pipe.execute()

        counted, latest = redis_call(go)
        by_file: list[dict[str, Any]] = []
        by_code: dict[str, int] = {}
        for member, score in counted:
            code, _, path = _text(member).partition(" ")
            by_code[code] = by_code.get(code, 0) + int(score)
            if len(by_file) < files:
                by_file.append({"path": path, "code": code, "count": int(score)})
        entries = []
        for raw in latest:
            try:
                entries.append(json.loads(raw))
            except ValueError:
                continue  # a damaged entry costs one line of the list, not the dashboard
        return {"by_file": by_file, "by_code_here": by_code, "recent": entries}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
