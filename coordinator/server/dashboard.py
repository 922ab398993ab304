"""The live dashboard: the page served at ``GET /dashboard`` and the data behind it (docs/dashboard.md).

The page (``pages/dashboard.html``, package data) is one self-contained file: inline script and style, no
request to any other origin. It holds no data; it asks the JSON routes with the token the user gives it:
``GET /v1/dashboard`` (this module's `snapshot`), ``POST /v1/dashboard/diff`` (`version_diff`),
``POST /v1/history`` and the change-event long poll ``POST /v1/events``, all open to a viewer token.

Invariant: the page runs only its own script. It is answered with a Content-Security-Policy that allows
exactly the hashes of its inline script and style, connections to this origin only, and no framing; the
script writes data into the page as text, never as markup (file names and session ids come from callers).
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.diffs import unified_diff

if TYPE_CHECKING:
    from coordinator.client.local import LocalClient
    from coordinator.engine import Coordinator

DASHBOARD_PATH = "/dashboard"
MAX_SESSIONS = 200  # the most recently active; a stress fleet may have thousands
RECENT_EVENTS = 300
MAX_DIFF_LINES = 20_000  # difflib is quadratic at worst: larger versions are diffed by `history --diff`
MAX_DIFF_CHARS = 200_000

_T = TypeVar("_T")


@cache
def page() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The page and its headers (read once per process)."""
    html = resources.files("coordinator.server").joinpath("pages/dashboard.html").read_bytes()
    return html, [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-security-policy", content_security_policy(html).encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ]


def content_security_policy(html: bytes) -> str:
    """Only this page's own inline script and style run; requests go to this origin only."""

    def hashes(tag: bytes) -> str:
        bodies = re.findall(rb"<" + tag + rb">(.*?)</" + tag + rb">", html, re.DOTALL)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b).digest()).decode()}'" for b in bodies)

    return (
        f"default-src 'none'; script-src {hashes(b'script')}; style-src {hashes(b'style')}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def snapshot(coord: Coordinator, client: LocalClient, role: str, token_expires_at: float) -> dict[str, Any]:
    """Everything the page shows except the timeline: health, sessions, leases, refusals, recent change
    events with the cursor to follow them. A part Redis cannot give is empty, with a note saying so.

    Invariant: the answer takes at most one Redis timeout. Every part but the history comes from Redis, so
    once one part fails (the health ping first of all), the parts after it are not asked: each would wait
    its own timeout on a Redis that hangs, and the page would wait for all of them in turn."""
    parts = _Parts()
    started = time.perf_counter()
    redis_ok = parts.get("redis", lambda: coord.ping() or _no_pong(), False)
    ping_ms = (time.perf_counter() - started) * 1000
    recent: list[Any] = parts.get("events", lambda: client.recent_events(RECENT_EVENTS), [])
    seen: list[tuple[str, float]] = parts.get("sessions", coord.sessions, [])
    leases: list[Any] = parts.get("leases", lambda: client.leases(None), [])
    by_code: dict[str, int] = parts.get("refusals", coord.refusal_counts, {})
    by_file: dict[str, Any] = parts.get(
        "refusals_by_file", coord.refusals_by_file, {"by_file": [], "by_code_here": {}, "recent": []}
    )
    cursor = recent[-1].id if recent else parts.get("cursor", lambda: client.poll_events("$").cursor, "$")
    info: dict[str, Any] = parts.get("redis_info", coord.redis_info, {})
    return {
        "now": time.time(),
        "role": role,
        "token_expires_at": token_expires_at,
        "health": {"redis": redis_ok, "ping_ms": round(ping_ms, 2) if redis_ok else None, **info},
        "sessions": [{"session": s, "last_seen": t} for s, t in seen[-MAX_SESSIONS:]],
        "leases": [{**x.to_dict(), "ticket": looks_like_ticket(x)} for x in leases],
        "events": [e.to_dict() for e in recent],
        "cursor": cursor,
        "refusals": {"by_code": by_code, **by_file},
        "hook_failures": _hook_failures(coord.root),  # a file in the state folder: not a Redis part
        "notes": parts.notes,
    }


class _Parts:
    """The parts of a snapshot, asked in turn until one fails; the rest are then not asked (`snapshot`)."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}
        self.failed: str | None = None

    def get(self, name: str, fn: Callable[[], _T], default: _T) -> _T:
        if self.failed is not None:
            self.notes[name] = f"not asked: Redis did not answer for {self.failed}"
            return default
        try:
            return fn()
        except CoordinatorError as exc:
            self.notes[name] = exc.message
            self.failed = name
            return default


def _no_pong() -> bool:
    raise CoordinatorError(ErrorCode.STATE_UNAVAILABLE, "Redis did not answer the health check (PING).")


def _hook_failures(root: str) -> dict[str, Any]:
    """The agents' hooks' own failures (coordinator/agents/failures.py), which the hooks let pass; the
    root's path is said as "." (invariant 5: no server path leaves the service)."""
    from coordinator.agents.failures import recent

    count, newest = recent(root, 5)
    scrub = root.rstrip("/")
    shown = [{**f._asdict(), "what": f.what.replace(scrub, ".")} for f in newest]
    return {"count": count, "recent": shown}


def looks_like_ticket(lease: Any) -> bool:
    """Whether a lease has the shape of the hook adapter's write ticket: exclusive, one file (no glob), a
    life no longer than a ticket's. A lease is not marked as a ticket, so this is the shape only: a session's
    own lease of that shape is shown as a ticket too (docs/dashboard.md says so)."""
    from coordinator.agents.adapter import TICKET_TTL_S

    one_file = not any(ch in lease.pattern for ch in "*?[") and not lease.pattern.endswith("/")
    return bool(lease.mode == "exclusive" and one_file and lease.ends_at - lease.granted_at <= TICKET_TTL_S + 1)


def version_diff(coord: Coordinator, path: str, version: int, context: int = 3) -> dict[str, Any]:
    """The unified diff of one recorded version of `path` against the content before it."""
    key = coord.resolve(path).key
    entry = next((e for e in coord.history(path) if e.version == version), None)
    if entry is None:
        raise CoordinatorError(
            ErrorCode.FILE_NOT_FOUND,
            f"{key} has no recorded version {version}. List its versions with POST /v1/history.",
            path=key,
        )
    out: dict[str, Any] = {**entry.to_dict(), "path": key, "diff": None, "note": "", "truncated": False}
    before, after = coord.content(key, entry.before), coord.content(key, entry.after)
    if before is None or after is None:
        out["note"] = "The content of this version is no longer kept (removed by gc, or changed outside)."
        return out
    if before.count(b"\n") + after.count(b"\n") > MAX_DIFF_LINES:
        out["note"] = f"Too large to diff here; run `edit-coordinator history {key} --diff {version}`."
        return out
    text = unified_diff(before, after, f"a/{key}", f"b/{key} (version {version})", context=context)
    if text is None:
        out["note"] = f"Binary or undecodable content ({len(before)} -> {len(after)} bytes)."
        return out
    out["diff"], out["truncated"] = text[:MAX_DIFF_CHARS], len(text) > MAX_DIFF_CHARS
    return out
