"""The service's answer models and its own request models (tokens, diffs), and its configuration. The
requests of the `Client` operations are their declarations (coordinator/client/operations.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from coordinator.arguments import SESSION_PATTERN
from coordinator.client.operations import MAX_INT, MAX_PATH_CHARS, PathArg
from coordinator.history import HistoryEntry
from coordinator.server.common import SERVICE_CODES, MiB

_STRICT = ConfigDict(strict=True, extra="forbid")


class TokenRequest(BaseModel):
    model_config = _STRICT
    role: Literal["session", "viewer"] = Field(
        default="session",
        description="'session': a token acting only as `session`; 'viewer': a read-only token for inspection "
        "routes (the dashboard), naming no session.",
    )
    session: str | None = Field(default=None, pattern=SESSION_PATTERN, description="Needed for a session token.")
    ttl_s: int = Field(default=24 * 3600, ge=1, le=366 * 24 * 3600)

    @model_validator(mode="after")
    def _session_matches_role(self) -> TokenRequest:
        if self.role == "session" and self.session is None:
            raise ValueError("a session token needs 'session' (the session id it acts as)")
        if self.role == "viewer" and self.session is not None:
            raise ValueError("a viewer token names no session; omit 'session'")
        return self


class HistoryResponse(BaseModel):
    path: str
    entries: list[HistoryEntry]


class LeaseInfo(BaseModel):
    id: str
    session: str
    pattern: str
    mode: Literal["exclusive", "shared"]
    token: int = Field(description="The fencing token: later grants have larger ones.")
    granted_at: float
    ends_at: float


class LeasesResponse(BaseModel):
    leases: list[LeaseInfo]


class ReleaseResponse(BaseModel):
    released: int = Field(description="How many leases ended.")


class ChangeEventInfo(BaseModel):
    id: str = Field(description="The event's stream id.")
    path: str
    session: str
    version: int
    operation: str
    ranges: list[list[int]] = Field(description="Changed lines of the new version, 1-based, inclusive [first, last].")
    time: float
    hash: str | None
    rebased: bool


class EventsResponse(BaseModel):
    events: list[ChangeEventInfo]
    cursor: str = Field(description="Pass as `since` to the next call to continue without a gap.")


class NoticeInfo(BaseModel):
    paths: list[str]
    writers: list[str]
    text: str


class NoticesResponse(BaseModel):
    notice: NoticeInfo | None = Field(description="Files the session read that others have written since.")


class SessionStatusResponse(BaseModel):
    session: str
    role: Literal["session", "admin"]
    token_expires_at: float
    last_seen: float | None = Field(description="Unix time of the session's last read or write, if known.")
    leases: list[LeaseInfo] = Field(default_factory=list, description="The session's live leases.")


class SessionInfo(BaseModel):
    session: str
    last_seen: float


class SessionsResponse(BaseModel):
    sessions: list[SessionInfo]


class TokenResponse(BaseModel):
    token: str
    role: Literal["session", "viewer"]
    session: str | None = Field(description="The session a session token acts as; null for a viewer token.")
    expires_at: float


class HealthResponse(BaseModel):
    status: Literal["ok", "degraded", "draining"]
    version: str
    redis: bool
    draining: bool
    pid: int


class ShutdownResponse(BaseModel):
    status: Literal["shutting_down"]
    message: str


class DiffRequest(BaseModel):
    model_config = _STRICT
    path: PathArg
    version: int = Field(ge=1, le=MAX_INT, description="The recorded version whose change to show.")
    context: int = Field(default=3, ge=0, le=100, description="Unchanged lines shown around each change.")


class DiffResponse(BaseModel):
    model_config = ConfigDict(extra="allow")  # every field of the history entry comes along
    path: str
    version: int
    session: str
    operation: str
    time: float
    first_line: int
    last_line: int
    diff: str | None = Field(
        description="Unified diff from the content before the version to its own; null "
        "when it cannot be shown (`note` says why)."
    )
    note: str
    truncated: bool = Field(description="The diff was longer than the service shows (200,000 characters).")


class RefusalByFile(BaseModel):
    path: str
    code: str
    count: int


class RefusalEntry(BaseModel):
    time: float
    session: str
    operation: str
    code: str
    path: str


class RefusalsInfo(BaseModel):
    by_code: dict[str, int] = Field(
        description="Refused writes by code, every process of the repository (each process adds its counts "
        "with its next write)."
    )
    by_code_here: dict[str, int] = Field(description="Refused file calls answered by this service, by code.")
    by_file: list[RefusalByFile] = Field(description="Refused file calls answered by this service, most first.")
    recent: list[RefusalEntry] = Field(description="The newest refused file calls answered by this service.")


class DashboardLease(LeaseInfo):
    ticket: bool = Field(description="Shaped like a hook write ticket: exclusive, one file, at most its life.")


class DashboardResponse(BaseModel):
    now: float
    role: Literal["session", "admin", "viewer"]
    token_expires_at: float
    health: dict[str, Any] = Field(description="`redis` (reachable), `ping_ms`, and INFO fields when given.")
    sessions: list[SessionInfo] = Field(description="The most recently active sessions, oldest first.")
    leases: list[DashboardLease] = Field(description="Live leases, write tickets of the hook adapter included.")
    events: list[ChangeEventInfo] = Field(description="The newest change events, oldest first.")
    cursor: str = Field(description="Pass as `since` to POST /v1/events to follow from here.")
    refusals: RefusalsInfo
    notes: dict[str, str] = Field(description="Parts that could not be read, and why.")
    history: dict[str, int] = Field(
        default_factory=dict, description="The history's size: `entries` (versions recorded) and `bytes`."
    )


class ErrorResponse(BaseModel):
    code: str = Field(
        description="A library error code (coordinator.ErrorCode) or one of the service's own: "
        + ", ".join(sorted(SERVICE_CODES))
    )
    message: str = Field(description="What went wrong and what to do next, written for the model.")
    details: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerConfig:
    """What every worker process needs to serve one root. Carries no secret (only where to find it)."""

    root: str
    redis_url: str | None = None
    durability: str = "fsync"
    policy: str | None = None  # the sessions' default policy (None: the engine's)
    match: str | None = None  # the sessions' default match (None: the engine's)
    lock_timeout: float = 10.0
    secret_file: str | None = None
    max_body_bytes: int = 16 * MiB
    max_path_chars: int = MAX_PATH_CHARS
    max_string_chars: int = 16 * MiB
    max_edits: int = 1000
    max_concurrency: int = 64
    idempotency_ttl_s: int = 24 * 3600
    session_token_ttl_s: int = 24 * 3600
    state_check: str | None = None  # the engine's state_check (None: its default)
    max_poll_wait_s: float = 30.0  # a long poll for change events waits at most this long
    max_polls: int = 256  # long polls waiting at once per worker (own bound and threads; not max_concurrency's)
    supervisor_pid: int | None = None
    inline: bool = True  # engine calls on the event loop while they need not wait (see App._engine)
    otel: bool = False  # an OpenTelemetry span per answered call (server/tracing.py)
    idle_exit_s: float = 0.0  # > 0: stop after this long without a request, or once the root is gone (one worker)
    hook_port: int = 0  # > 0: the loopback port of Claude Code's http hooks (the hook route alone, with hook_key)
    hook_key: str = ""  # the key those requests carry (cli/hookservice.py's KEY_HEADER)
    watch: bool = False  # the tree watcher (engine/watcher.py): every change recorded with its author (one worker)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        return cls(**json.loads(text))

    def validate(self) -> None:
        if self.durability not in ("fsync", "none"):
            raise ValueError("durability must be 'fsync' or 'none'")
        if self.policy not in (None, "strict", "rebase"):
            raise ValueError("policy must be 'strict' or 'rebase'")
        if self.match not in (None, "exact", "flexible"):
            raise ValueError("match must be 'exact' or 'flexible'")
        if self.state_check not in (None, "always", "cached"):
            raise ValueError("state_check must be 'always' or 'cached'")
        limits = ("max_body_bytes", "max_path_chars", "max_string_chars", "max_edits", "max_concurrency", "max_polls")
        for name in limits:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.idle_exit_s < 0:
            raise ValueError("idle_exit_s must be 0 (never) or a number of seconds")
        if self.max_path_chars > MAX_PATH_CHARS:
            raise ValueError(f"max_path_chars cannot exceed {MAX_PATH_CHARS}")


class HookEvent(RootModel[dict[str, Any]]):
    """The agent's hook payload as its hooks send it (Claude Code, Codex, Gemini CLI): session_id,
    hook_event_name, tool_name, tool_input, ... (docs/agents/)."""


class HookAnswer(RootModel[dict[str, Any]]):
    """The agent's hook answer (for Claude Code's `http` hook: its JSON hook output); with ?answer=command,
    `{"exit_code", "stdout", "stderr", "code"}`; with ?answer=plain, text: `EXIT_CODE CODE STDOUT_BYTES`, the
    stdout, the stderr."""
