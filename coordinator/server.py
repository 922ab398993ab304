"""The coordinator as an HTTP/JSON service: `edit-coordinator serve`.

An adapter: it authenticates, validates, limits and translates; the engine decides. Every route, its
models, its authentication and the statuses it may answer with are declared once, in `ROUTES`; the router
and the OpenAPI document are both made from that table. Every error code maps to one HTTP status, in
`STATUS_FOR_CODE`.

Stack (measured, see docs/http.md): a plain ASGI application (no framework) on uvicorn with httptools and
uvloop, several worker processes sharing one listening socket. Request bodies are validated by pydantic
straight from bytes (`model_validate_json`); engine calls run in a thread pool, so a call waiting for a
file lock never stalls the event loop. Worker processes share nothing but Redis and the file locks, which
is all the engine needs.

Authentication: a coordinator secret (``--secret-file``, ``$EDIT_COORDINATOR_SECRET``,
``$EDIT_COORDINATOR_SECRET_FILE``, or one generated on first use in ``<state dir>/server.secret``) signs
tokens with HMAC-SHA256. A session token names one session id and an expiry; whoever holds it acts as that
session and no other. An admin token may act as any session, read history, undo anybody's writes, issue
session tokens and shut the service down. `/v1/health` and `/openapi.json` need no token (they do nothing
and reveal nothing about the files); everything else answers 401 before reading the request body.

Idempotency: a write, edit, multi_edit or undo that carries an ``Idempotency-Key`` header is recorded in
Redis under (session, key) with the request's fingerprint. A repeat gets the first answer (header
``Idempotent-Replayed: true``); a concurrent duplicate waits for the first to finish and gets its answer;
the same key with a different request is refused. Answers that say "nothing was done, try again"
(``lock_timeout``, ``state_unavailable``, ``overloaded``, internal errors) are not kept, so a retry runs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs

import pydantic_core
import redis
import xxhash
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from . import __version__
from .engine import ReadResult, WriteResult
from .errors import CoordinatorError, ErrorCode
from .history import HistoryEntry

log = logging.getLogger("edit_coordinator.server")

KiB = 1024
MiB = 1024 * KiB

CONFIG_ENV = "EDIT_COORDINATOR_SERVER_CONFIG"
SUPERVISOR_ENV = "EDIT_COORDINATOR_SERVER_SUPERVISOR"
SECRET_ENV = "EDIT_COORDINATOR_SECRET"
SECRET_FILE_ENV = "EDIT_COORDINATOR_SECRET_FILE"
SECRET_FILE_NAME = "server.secret"
MIN_SECRET_BYTES = 16
OPENAPI_PATH = "/openapi.json"

SESSION_PATTERN = r"^[A-Za-z0-9._:@+/=-]{1,200}$"
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
_SESSION_RE = re.compile(SESSION_PATTERN)
_IDEM_RE = re.compile(IDEMPOTENCY_KEY_PATTERN)

# Hard caps of the request models. The configured limits (ServerConfig) may be lower, never higher; the
# OpenAPI document shows the configured ones.
MAX_PATH_CHARS = 4096
MAX_INT = 2**31 - 1


# ---------------------------------------------------------------------------------------------------------
# Errors: one code -> one status, here and nowhere else
# ---------------------------------------------------------------------------------------------------------
STATUS_FOR_CODE: dict[str, int] = {
    # the library's codes (coordinator.errors.ErrorCode)
    "not_read": 409,
    "stale": 409,
    "file_exists": 409,
    "no_match": 422,
    "ambiguous": 422,
    "no_change": 422,
    "is_directory": 422,
    "binary_file": 422,
    "special_file": 422,
    "unsupported_encoding": 422,
    "invalid_argument": 422,
    "file_not_found": 404,
    "too_large": 413,
    "outside_root": 403,
    "permission_denied": 403,
    "lock_timeout": 423,
    "leased": 423,
    "state_unavailable": 503,
    "io_error": 500,
    "placeholder": 422,
    # the service's own codes (no library equivalent)
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_in_progress": 409,
    "idempotency_key_reused": 422,
    "overloaded": 429,  # a limit of this service, a clear 4xx: retry after Retry-After
    "shutting_down": 503,
    "internal_error": 500,
}
SERVICE_CODES = frozenset(STATUS_FOR_CODE) - {c.value for c in ErrorCode}
# Answers that mean "nothing was done; the same call may succeed later": never kept for idempotent replay.
TRANSIENT_CODES = frozenset(
    {"lock_timeout", "leased", "state_unavailable", "overloaded", "shutting_down", "internal_error", "io_error"}
)
RETRY_AFTER_S = {"lock_timeout": 1, "leased": 1, "state_unavailable": 1, "overloaded": 1, "shutting_down": 5}

# A library code added later without a row here is answered 400 (a refusal, never a server error); the
# tests check that every code has its row.
UNMAPPED_STATUS = 400


class ServiceError(Exception):
    """A refusal by the service itself (authentication, limits, routing, idempotency)."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        assert code in STATUS_FOR_CODE, code
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.details = details

    @property
    def status(self) -> int:
        return STATUS_FOR_CODE[self.code]

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


def status_for(code: str) -> int:
    return STATUS_FOR_CODE.get(code, UNMAPPED_STATUS)


def _scrub(obj: Any) -> Any:
    """Make any string JSON-safe (file names on disk may carry undecodable bytes as lone surrogates)."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, Mapping):
        return {_scrub(k): _scrub(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_scrub(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    try:
        return pydantic_core.to_json(obj, fallback=str)
    except pydantic_core.PydanticSerializationError:
        return pydantic_core.to_json(_scrub(obj), fallback=str)


# ---------------------------------------------------------------------------------------------------------
# Models (the OpenAPI document is generated from these)
# ---------------------------------------------------------------------------------------------------------
_STRICT = ConfigDict(strict=True, extra="forbid")

SessionField = Field(
    default=None,
    pattern=SESSION_PATTERN,
    description="The session to act as. A session token may only name its own session (or omit it); "
    "an admin token may name any session (default: 'admin').",
)
Policy = Literal["strict", "rebase"]
PolicyField = Field(
    default=None,
    description="'strict' refuses an edit of a file that changed since this session's view; 'rebase' carries "
    "it over onto the changes when they do not overlap. Omitted: the coordinator's default.",
)
PathField = Field(
    min_length=1,
    max_length=MAX_PATH_CHARS,
    description="Path relative to the repository root (forward slashes), or absolute inside it.",
)


class ReadRequest(BaseModel):
    model_config = _STRICT
    path: str = PathField
    offset: int | None = Field(default=None, ge=0, le=MAX_INT, description="1-based first line.")
    limit: int | None = Field(default=None, ge=1, le=MAX_INT, description="Number of lines.")
    session: str | None = SessionField
    policy: Policy | None = PolicyField


class WriteRequest(BaseModel):
    model_config = _STRICT
    path: str = PathField
    content: str = Field(description="The whole new content, written as given.")
    session: str | None = SessionField
    policy: Policy | None = PolicyField


class EditRequest(BaseModel):
    model_config = _STRICT
    path: str = PathField
    old_string: str = Field(description="Exact text to replace ('' creates a missing or empty file).")
    new_string: str = Field(description="The replacement text.")
    replace_all: bool = False
    session: str | None = SessionField
    policy: Policy | None = PolicyField


class EditItem(BaseModel):
    model_config = _STRICT
    old_string: str
    new_string: str
    replace_all: bool = False


class MultiEditRequest(BaseModel):
    model_config = _STRICT
    path: str = PathField
    edits: list[EditItem] = Field(min_length=1, description="Applied in order, all or nothing.")
    session: str | None = SessionField
    policy: Policy | None = PolicyField


class UndoRequest(BaseModel):
    model_config = _STRICT
    path: str = PathField
    version: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT,
        description="Restore the content from before this version. Omitted: before this session's last "
        "write. Undoing writes of other sessions needs the admin token.",
    )
    session: str | None = SessionField
    policy: Policy | None = PolicyField


class HistoryRequest(BaseModel):
    model_config = _STRICT
    path: str = PathField
    limit: int = Field(default=100, ge=1, le=10_000, description="Newest entries to return.")


class TokenRequest(BaseModel):
    model_config = _STRICT
    session: str = Field(pattern=SESSION_PATTERN)
    ttl_s: int = Field(default=24 * 3600, ge=1, le=366 * 24 * 3600)


class HistoryResponse(BaseModel):
    path: str
    entries: list[HistoryEntry]


class SessionStatusResponse(BaseModel):
    session: str
    role: Literal["session", "admin"]
    token_expires_at: float
    last_seen: float | None = Field(description="Unix time of the session's last read or write, if known.")


class SessionInfo(BaseModel):
    session: str
    last_seen: float


class SessionsResponse(BaseModel):
    sessions: list[SessionInfo]


class TokenResponse(BaseModel):
    token: str
    session: str
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
    lock_timeout: float = 10.0
    secret_file: str | None = None
    max_body_bytes: int = 16 * MiB
    max_path_chars: int = MAX_PATH_CHARS
    max_string_chars: int = 16 * MiB
    max_edits: int = 1000
    max_concurrency: int = 64
    idempotency_ttl_s: int = 24 * 3600
    session_token_ttl_s: int = 24 * 3600
    supervisor_pid: int | None = None
    inline: bool = True  # engine calls on the event loop while they need not wait (see _InlineFirstLocks)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        return cls(**json.loads(text))

    def validate(self) -> None:
        if self.durability not in ("fsync", "none"):
            raise ValueError("durability must be 'fsync' or 'none'")
        for name in ("max_body_bytes", "max_path_chars", "max_string_chars", "max_edits", "max_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_path_chars > MAX_PATH_CHARS:
            raise ValueError(f"max_path_chars cannot exceed {MAX_PATH_CHARS}")


# ---------------------------------------------------------------------------------------------------------
# Secret and tokens
# ---------------------------------------------------------------------------------------------------------
TOKEN_VERSION = "ec1"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a session (acting only as `session`) or the admin (acting as anyone)."""

    role: Literal["session", "admin"]
    session: str | None
    expires_at: float

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signing_key(secret: bytes) -> bytes:
    # A derived key: the raw secret is used for nothing else, so another use of it cannot forge tokens.
    return hmac.new(secret, b"edit-coordinator/token/v1", hashlib.sha256).digest()


def mint_token(secret: bytes, *, session: str | None = None, admin: bool = False, ttl_s: float = 24 * 3600) -> str:
    """A signed token. A session token (admin=False) needs `session`; an admin token acts as anyone."""
    if not admin and (session is None or not _SESSION_RE.match(session)):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "A session token needs a session id of 1-200 characters from letters, digits and . _ : @ + / = -",
        )
    payload: dict[str, Any] = {"r": "admin" if admin else "session", "e": int(time.time() + ttl_s)}
    if not admin:
        payload["s"] = session
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    signed = f"{TOKEN_VERSION}.{body}"
    sig = hmac.new(_signing_key(secret), signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{_b64(sig)}"


def verify_token(secret: bytes, token: str, now: float | None = None) -> Principal:
    """The principal a token names; raises ServiceError('unauthorized') for anything not valid now."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_VERSION:
        raise ServiceError(
            "unauthorized",
            "The bearer token is malformed. Use a token issued by this coordinator "
            "(`edit-coordinator token`, or POST /v1/tokens with the admin token).",
            reason="malformed",
        )
    signed = f"{parts[0]}.{parts[1]}"
    want = hmac.new(_signing_key(secret), signed.encode(), hashlib.sha256).digest()
    try:
        got = _unb64(parts[2])
    except (ValueError, TypeError):
        got = b""
    if not hmac.compare_digest(want, got):
        raise ServiceError(
            "unauthorized",
            "The bearer token's signature is not valid for this coordinator (wrong or rotated secret). "
            "Get a new token.",
            reason="bad_signature",
        )
    try:
        payload = json.loads(_unb64(parts[1]))
        role = payload["r"]
        exp = float(payload["e"])
        session = payload.get("s")
        if role not in ("session", "admin") or (role == "session" and not isinstance(session, str)):
            raise ValueError(role)
    except (ValueError, TypeError, KeyError):
        raise ServiceError("unauthorized", "The bearer token's content is malformed.", reason="malformed") from None
    if (now if now is not None else time.time()) >= exp:
        raise ServiceError(
            "unauthorized",
            "The bearer token has expired. Get a new token and repeat the call (nothing was done).",
            reason="expired",
            expired_at=exp,
        )
    return Principal(role=role, session=session if role == "session" else None, expires_at=exp)


def state_dir_of(root: str | os.PathLike[str]) -> Path:
    from .layout import state_dir_of

    return state_dir_of(root)


def load_secret(
    root: str | os.PathLike[str], secret_file: str | None = None, create: bool = True
) -> tuple[bytes, str | None]:
    """The coordinator secret and the file it came from (None when it came from the environment).

    Order: `secret_file`, $EDIT_COORDINATOR_SECRET, $EDIT_COORDINATOR_SECRET_FILE, then
    `<state dir>/server.secret`, generated (mode 0600) when missing and `create` is true.
    """
    source: str | None
    if secret_file:
        source = secret_file
    elif os.environ.get(SECRET_ENV):
        raw = os.environ[SECRET_ENV].strip().encode()
        _check_secret(raw, f"${SECRET_ENV}")
        return raw, None
    elif os.environ.get(SECRET_FILE_ENV):
        source = os.environ[SECRET_FILE_ENV]
    else:
        path = state_dir_of(root) / SECRET_FILE_NAME
        if not path.exists() and create:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_urlsafe(48) + "\n")
        source = str(path)
    try:
        raw = Path(source).read_bytes().strip()
    except OSError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"Cannot read the coordinator secret from {source}: {exc.strerror or exc}. Pass --secret-file, "
            f"or set ${SECRET_ENV}.",
        ) from None
    _check_secret(raw, source)
    return raw, source


def _check_secret(raw: bytes, source: str) -> None:
    if len(raw) < MIN_SECRET_BYTES:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The coordinator secret from {source} is shorter than {MIN_SECRET_BYTES} bytes; use a long "
            "random one (for example `python -c 'import secrets; print(secrets.token_urlsafe(48))'`).",
        )


# ---------------------------------------------------------------------------------------------------------
# Idempotency
# ---------------------------------------------------------------------------------------------------------
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

    def key(self, session: str, idem_key: str) -> str:
        h = xxhash.xxh3_128_hexdigest(f"{session}\x00{idem_key}".encode())
        return f"ec:idem:{{{self.ns}}}:{h}"

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except redis.RedisError as exc:
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                "The coordination state (Redis) could not be reached to record this request's idempotency "
                f"key, so nothing was read or written ({type(exc).__name__}). Try again in a moment.",
            ) from exc

    def begin(self, k: str, fingerprint: bytes, may_wait: bool = True) -> tuple[int, bytes] | None:
        """None: the caller owns the key and must run the operation. Otherwise the answer to replay.

        A duplicate of a request still running waits for its answer, up to `wait_s`; with `may_wait` false
        it raises _WouldBlock instead (it is on the event loop and must not sleep)."""
        pending = b"P" + fingerprint
        deadline = time.monotonic() + self.wait_s
        delay = 0.002
        while True:
            if self._call(lambda: self.r.set(k, pending, nx=True, px=self.pending_ms)):
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
                raise _WouldBlock
            if time.monotonic() >= deadline:
                raise ServiceError(
                    "request_in_progress",
                    "A request with this Idempotency-Key is still being processed. Retry the same call "
                    "with the same key in a moment to get its answer.",
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def finish(self, k: str, fingerprint: bytes, status: int, body: bytes) -> None:
        self._call(lambda: self.r.set(k, b"D" + fingerprint + b"%03d" % status + body, ex=self.ttl_s))

    def release(self, k: str, fingerprint: bytes) -> None:
        with contextlib.suppress(CoordinatorError):
            self._call(lambda: self._release(keys=[k], args=[b"P" + fingerprint]))


# ---------------------------------------------------------------------------------------------------------
# Routes
# ---------------------------------------------------------------------------------------------------------
Auth = Literal["none", "any", "admin"]
Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: str  # name of an App method
    summary: str
    auth: Auth
    request: type[BaseModel] | None
    response: type[Any]  # a pydantic model, or one of the engine's result dataclasses (no copy to drift)
    errors: tuple[int, ...]
    mutating: bool = False
    query: tuple[tuple[str, str], ...] = ()
    ok_status: int = 200
    tags: tuple[str, ...] = field(default=("files",))
    limited: bool = True  # counts against max_concurrency (shutdown does not: an overloaded service can be stopped)


_AUTH_ERRORS = (401, 403)
_BODY_ERRORS = (413, 422)
_FILE_ERRORS = (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503)
_WRITE_ERRORS = (*_FILE_ERRORS, 409, 423)

ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/read", "op_read", "Read lines of a text file", "any", ReadRequest, ReadResult,
          (*_FILE_ERRORS, 409, 423)),
    Route("POST", "/v1/write", "op_write", "Create or overwrite a file", "any", WriteRequest, WriteResult,
          _WRITE_ERRORS, mutating=True),
    Route("POST", "/v1/edit", "op_edit", "Replace old_string with new_string", "any", EditRequest,
          WriteResult, _WRITE_ERRORS, mutating=True),
    Route("POST", "/v1/multi_edit", "op_multi_edit", "Several edits of one file, all or nothing", "any",
          MultiEditRequest, WriteResult, _WRITE_ERRORS, mutating=True),
    Route("POST", "/v1/undo", "op_undo", "Restore a file to before a recorded write", "any", UndoRequest,
          WriteResult, _WRITE_ERRORS, mutating=True),
    Route("POST", "/v1/history", "op_history", "Recorded versions of a file, newest first (admin)", "admin",
          HistoryRequest, HistoryResponse, (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503), tags=("admin",)),
    Route("GET", "/v1/session", "op_session", "The calling session's status", "any", None,
          SessionStatusResponse, (*_AUTH_ERRORS, 422, 503), query=(("session", SESSION_PATTERN),),
          tags=("sessions",)),
    Route("GET", "/v1/sessions", "op_sessions", "Sessions seen recently (admin)", "admin", None,
          SessionsResponse, (*_AUTH_ERRORS, 503), tags=("admin",)),
    Route("POST", "/v1/tokens", "op_token", "Issue a session token (admin)", "admin", TokenRequest,
          TokenResponse, (*_AUTH_ERRORS, *_BODY_ERRORS), tags=("admin",)),
    Route("POST", "/v1/admin/shutdown", "op_shutdown", "Stop the service gracefully (admin)", "admin", None,
          ShutdownResponse, _AUTH_ERRORS, ok_status=202, tags=("admin",), limited=False),
    Route("GET", "/v1/health", "op_health", "Liveness and Redis reachability (no token needed)", "none",
          None, HealthResponse, (503,), tags=("service",)),
)  # fmt: skip
_ROUTE_BY_PATH: dict[str, dict[str, Route]] = {}
for _r in ROUTES:
    _ROUTE_BY_PATH.setdefault(_r.path, {})[_r.method] = _r


def _plain_arrays(node: Any) -> Any:
    """Fixed-length tuples as plain arrays (`prefixItems` -> `items` + length): some OpenAPI tools still
    read `items` only."""
    if isinstance(node, list):
        return [_plain_arrays(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _plain_arrays(v) for k, v in node.items()}
    prefix = out.pop("prefixItems", None)
    if prefix is not None:
        same = all(p == prefix[0] for p in prefix)
        out["items"] = prefix[0] if prefix and same else {}
        out.setdefault("minItems", len(prefix))
        out.setdefault("maxItems", len(prefix))
    return out


def openapi_document(config: ServerConfig | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service, generated from ROUTES and the pydantic models."""
    cfg = config or ServerConfig(root=".")
    schemas: dict[str, Any] = {}

    def ref(model: type[Any]) -> dict[str, str]:
        if model.__name__ not in schemas:
            js = _plain_arrays(TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}"))
            for name, sub in js.pop("$defs", {}).items():
                schemas.setdefault(name, sub)
            props = js.get("properties", {})
            if "path" in props and props["path"].get("type") == "string":
                props["path"]["maxLength"] = cfg.max_path_chars
            schemas[model.__name__] = js
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    error_ref = ref(ErrorResponse)
    paths: dict[str, Any] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.handler.removeprefix("op_"),
            "summary": route.summary,
            "tags": list(route.tags),
            "responses": {
                str(route.ok_status): {
                    "description": "Success",
                    "content": {"application/json": {"schema": ref(route.response)}},
                }
            },
        }
        if route.auth == "none":
            op["security"] = []
        params: list[dict[str, Any]] = []
        if route.mutating:
            params.append(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "Retry safely: a repeated call with the same key returns the first "
                    "answer instead of applying the change twice.",
                    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
                }
            )
        for name, pattern in route.query:
            params.append(
                {"name": name, "in": "query", "required": False, "schema": {"type": "string", "pattern": pattern}}
            )
        if params:
            op["parameters"] = params
        if route.request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref(route.request)}},
            }
        statuses = set(route.errors) | ({429} if route.limited and route.auth != "none" else set())
        for status in sorted(statuses):
            codes = sorted(c for c, s in STATUS_FOR_CODE.items() if s == status)
            op["responses"][str(status)] = {
                "description": "Refused: " + ", ".join(codes),
                "content": {"application/json": {"schema": error_ref}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = op
    # The session's string fields are bounded by the configured limits too.
    for name in ("WriteRequest", "EditRequest", "EditItem"):
        for prop, sub in schemas.get(name, {}).get("properties", {}).items():
            if prop in ("content", "old_string", "new_string"):
                sub["maxLength"] = cfg.max_string_chars
    if "MultiEditRequest" in schemas:
        schemas["MultiEditRequest"]["properties"]["edits"]["maxItems"] = cfg.max_edits
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "edit-coordinator",
            "version": __version__,
            "description": "Read / Write / Edit for fleets of coding agents on one repository. Errors carry "
            "the library's `code` and `message`.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


# ---------------------------------------------------------------------------------------------------------
# Engine calls: on the event loop while they need not wait, in the thread pool when they must
# ---------------------------------------------------------------------------------------------------------
class _WouldBlock(Exception):
    """Raised on the event-loop thread where the call would have to wait (a taken file lock, a duplicate
    request still running). Nothing has been read under a lock or written when it is raised; the caller runs
    the whole call again in the thread pool, where it waits as usual."""


class _InlineFirstLocks:
    """Wraps the engine's LockManager. On the event-loop thread a file lock is only tried, never waited
    for: a taken lock raises _WouldBlock. In any other thread, acquire is the manager's own.

    Why: handing every call to a thread costs two context switches (measured: ~0.6 ms per call on the
    2-core machine under load, more than the engine's own work), while most calls find their lock free.
    """

    def __init__(self, inner: Any, loop_thread: int) -> None:
        self.inner = inner
        self.loop_thread = loop_thread

    def acquire(self, key: str, timeout: float | None = -1.0) -> Any:
        if threading.get_ident() != self.loop_thread:
            return self.inner.acquire(key, timeout)
        from .locks import HeldLock

        try:
            fd = self.inner._open(key)
        except OSError:
            raise _WouldBlock from None  # the thread-pool run reports it as the manager does
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # taken (or failing): the thread-pool run waits, or reports the error
            raise _WouldBlock from None
        return HeldLock(key, fd, 0.0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _install_inline_locks(coord: Any) -> bool:
    """Wrap `coord.locks` for inline calls; False (everything in the thread pool) if the engine's lock
    manager does not have the expected shape."""
    inner = getattr(coord, "locks", None)
    if inner is None or not callable(getattr(inner, "_open", None)):
        return False
    coord.locks = _InlineFirstLocks(inner, threading.get_ident())
    return True


# ---------------------------------------------------------------------------------------------------------
# The ASGI application
# ---------------------------------------------------------------------------------------------------------
_JSON = (b"content-type", b"application/json")
_NO_STORE = (b"cache-control", b"no-store")


class _Disconnected(Exception):
    pass


def _validation_message(exc: ValidationError, where: str) -> tuple[str, list[dict[str, Any]]]:
    problems: list[dict[str, Any]] = []
    parts: list[str] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:20]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "body"
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "json_invalid":
            msg += " (the body must be UTF-8 JSON with no lone surrogates)"
        problems.append({"field": loc, "problem": msg})
        parts.append(f"{loc}: {msg}")
    return f"Invalid request to {where}: " + "; ".join(parts) + ". Nothing was done.", problems


class App:
    """The ASGI application for one root. Create with `create_app`; one instance per worker process."""

    def __init__(self, config: ServerConfig, secret: bytes) -> None:
        config.validate()
        self.config = config
        self._secret = secret
        self._tokens: dict[str, Principal] = {}
        self.coord: Any = None  # Coordinator, opened at start-up (lifespan) or on first use
        self.idem: IdempotencyStore | None = None
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.max_concurrency, thread_name_prefix="ec-http"
        )
        self.in_flight = 0
        self.draining = False
        self.inline = False  # set when the coordinator is opened on the event-loop thread
        self._openapi: bytes | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------
    def open(self, on_loop: bool = False) -> None:
        """Open the coordinator. `on_loop`: called on the event-loop thread (lifespan start-up), which is
        then the one thread where engine calls run inline."""
        if self.coord is not None:
            return
        from .engine import Coordinator

        self.coord = Coordinator(
            self.config.root,
            self.config.redis_url,
            durability=self.config.durability,  # type: ignore[arg-type]
            lock_timeout=self.config.lock_timeout,
        )
        if on_loop and self.config.inline:
            self.inline = _install_inline_locks(self.coord)
        self.idem = IdempotencyStore(
            self.coord.redis,
            self.coord.namespace,
            ttl_s=self.config.idempotency_ttl_s,
            wait_s=self.config.lock_timeout + 5.0,
        )

    def close(self) -> None:
        """Refuse new work, let running engine calls finish, then close the coordinator."""
        self.draining = True
        self.executor.shutdown(wait=True)
        if self.coord is not None:
            self.coord.close()

    async def _lifespan(self, receive: Callable[[], Awaitable[dict[str, Any]]], send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self.open(on_loop=True)
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.draining = True
                await asyncio.get_running_loop().run_in_executor(None, self.close)
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- ASGI entry ---------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return  # websockets are not served
        try:
            status, body, headers = await self._dispatch(scope, receive)
        except _Disconnected:
            return
        headers = [_JSON, _NO_STORE, (b"content-length", str(len(body)).encode()), *headers]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _dispatch(self, scope: dict[str, Any], receive: Any) -> Answer:
        path: str = scope["path"]
        method: str = scope["method"]
        if path == OPENAPI_PATH and method in ("GET", "HEAD"):
            if self._openapi is None:
                self._openapi = dumps(openapi_document(self.config))
            return 200, self._openapi, []
        by_method = _ROUTE_BY_PATH.get(path)
        if by_method is None:
            return self._error(
                ServiceError(
                    "not_found",
                    f"There is no endpoint {path[:200]!r}. The API is described at {OPENAPI_PATH}.",
                )
            )
        route = by_method.get(method)
        if route is None:
            allow = ", ".join(sorted(by_method))
            status, body, headers = self._error(
                ServiceError("method_not_allowed", f"{path} accepts {allow}, not {method[:20]}.")
            )
            return status, body, [*headers, (b"allow", allow.encode())]
        if route.auth == "none":
            return await getattr(self, route.handler)(route, None, None, scope)
        if route.limited and self.in_flight >= self.config.max_concurrency:
            return self._error(
                ServiceError(
                    "overloaded",
                    f"The coordinator is handling {self.in_flight} requests, its limit per worker; nothing "
                    "was done. Retry in a moment.",
                )
            )
        self.in_flight += 1
        try:
            return await self._handle(route, scope, receive)
        except (ServiceError, CoordinatorError) as exc:
            return self._error(exc)
        finally:
            self.in_flight -= 1

    async def _handle(self, route: Route, scope: dict[str, Any], receive: Any) -> Answer:
        headers = _headers(scope)
        # Authentication first: an unauthenticated request is answered before its body is even read.
        principal = self._authenticate(headers.get("authorization"))
        if route.auth == "admin" and not principal.is_admin:
            raise ServiceError("forbidden", f"{route.path} needs the admin token; a session token cannot use it.")
        if route.mutating and self.draining:
            raise ServiceError(
                "shutting_down",
                "The coordinator is shutting down and accepts no new writes; nothing was done. Retry against "
                "the restarted service.",
            )
        model: BaseModel | None = None
        if route.request is not None:
            body = await self._read_body(headers, receive)
            try:
                model = route.request.model_validate_json(body)
            except ValidationError as exc:
                message, problems = _validation_message(exc, route.path)
                raise _refusal(ErrorCode.INVALID_ARGUMENT, message, problems=problems) from None
            self._check_limits(model)
        if self.coord is None:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.open)
        handler = getattr(self, route.handler)
        return await handler(route, principal, model, scope, headers)

    # -- helpers ------------------------------------------------------------------------------------------
    def _error(self, exc: ServiceError | CoordinatorError) -> Answer:
        code = exc.code.value if isinstance(exc, CoordinatorError) else exc.code
        extra: list[tuple[bytes, bytes]] = []
        status = status_for(code)
        if code in RETRY_AFTER_S:
            extra.append((b"retry-after", str(RETRY_AFTER_S[code]).encode()))
        if status == 401:
            extra.append((b"www-authenticate", b'Bearer realm="edit-coordinator"'))
        if status == 413:
            extra.append((b"connection", b"close"))
        return status, dumps(exc.to_dict()), extra

    def _authenticate(self, header: str | None) -> Principal:
        if not header:
            raise ServiceError(
                "unauthorized",
                "This endpoint needs a bearer token (header 'Authorization: Bearer <token>'); nothing was done.",
                reason="missing",
            )
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 4096:
            raise ServiceError(
                "unauthorized",
                "The Authorization header must be 'Bearer <token>'; nothing was done.",
                reason="malformed",
            )
        cached = self._tokens.get(token)
        if cached is not None and cached.expires_at > time.time():
            return cached
        principal = verify_token(self._secret, token)
        if len(self._tokens) >= 4096:
            self._tokens.clear()
        self._tokens[token] = principal
        return principal

    async def _read_body(self, headers: dict[str, str], receive: Any) -> bytes:
        limit = self.config.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise _refusal(ErrorCode.INVALID_ARGUMENT, "Content-Length is not a number.")
            if int(declared) > limit:
                raise _body_too_large(int(declared), limit)
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            if chunk:
                total += len(chunk)
                if total > limit:
                    raise _body_too_large(total, limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _check_limits(self, model: BaseModel) -> None:
        cfg = self.config
        path = getattr(model, "path", None)
        if isinstance(path, str) and len(path) > cfg.max_path_chars:
            raise _refusal(
                ErrorCode.INVALID_ARGUMENT,
                f"path is {len(path)} characters long, over this service's limit of {cfg.max_path_chars}.",
            )
        strings: list[tuple[str, str]] = []
        if isinstance(model, WriteRequest):
            strings.append(("content", model.content))
        elif isinstance(model, EditRequest):
            strings += [("old_string", model.old_string), ("new_string", model.new_string)]
        elif isinstance(model, MultiEditRequest):
            if len(model.edits) > cfg.max_edits:
                raise _refusal(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{len(model.edits)} edits in one multi_edit, over this service's limit of "
                    f"{cfg.max_edits}; split them into several calls.",
                )
            for i, e in enumerate(model.edits):
                strings += [(f"edits[{i}].old_string", e.old_string), (f"edits[{i}].new_string", e.new_string)]
        for name, value in strings:
            if len(value) > cfg.max_string_chars:
                raise _refusal(
                    ErrorCode.TOO_LARGE,
                    f"{name} is {len(value)} characters long, over this service's limit of "
                    f"{cfg.max_string_chars}; nothing was done.",
                )

    def _acting_session(self, principal: Principal, requested: str | None) -> str:
        """The session a call acts as. Invariant: a session token acts only as its own session."""
        if principal.is_admin:
            return requested or "admin"
        assert principal.session is not None
        if requested is not None and requested != principal.session:
            raise ServiceError(
                "forbidden",
                f"This token belongs to session {principal.session!r}; it cannot act as {requested!r}. "
                "Omit 'session' or use that session's own token.",
            )
        return principal.session

    async def _run(self, fn: Callable[[], Answer]) -> Answer:
        """Run an engine call: inline first (it raises _WouldBlock before doing anything if it would have to
        wait), else in the thread pool."""
        if self.inline:
            try:
                return fn()
            except _WouldBlock:
                pass
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def _call_engine(self, fn: Callable[[], Any]) -> Answer:
        """Run an engine call and turn its outcome (result or refusal) into an answer. In a worker thread."""
        try:
            return 200, dumps(fn()), []
        except (CoordinatorError, ServiceError) as exc:
            return self._error(exc)
        except _WouldBlock:
            raise
        except Exception:
            log.exception("internal error in an engine call")
            return self._error(
                ServiceError(
                    "internal_error",
                    "The coordinator failed while handling this call (the error is in the server's log). "
                    "Read the file again to see whether the change was applied before you retry.",
                )
            )

    async def _mutate(
        self, route: Route, session: str, model: BaseModel, headers: dict[str, str], fn: Callable[[], Any]
    ) -> Answer:
        """Run a mutating engine call, once per (session, Idempotency-Key) when the header is given."""
        idem_key = headers.get("idempotency-key")
        if idem_key is None:
            return await self._run(lambda: self._call_engine(fn))
        if not _IDEM_RE.match(idem_key):
            raise _refusal(
                ErrorCode.INVALID_ARGUMENT,
                "Idempotency-Key must be 1-255 visible ASCII characters (for example a UUID).",
            )
        store = self.idem
        assert store is not None
        fingerprint = xxhash.xxh3_128_digest(
            f"{route.path}\x00{session}\x00".encode() + model.model_dump_json().encode()
        )
        k = store.key(session, idem_key)

        loop_thread = threading.get_ident()
        state = {"owned": False, "settled": False}

        def run() -> Answer:
            if not state["owned"]:
                on_loop = threading.get_ident() == loop_thread
                try:
                    replay = store.begin(k, fingerprint, may_wait=not on_loop)
                except (CoordinatorError, ServiceError) as exc:
                    return self._error(exc)
                if replay is not None:
                    status, body = replay
                    return status, body, [(b"idempotent-replayed", b"true")]
                state["owned"] = True
            # A _WouldBlock from here leaves the claim in place: the thread-pool run goes on as its owner.
            answer = self._call_engine(fn)
            status, body, _ = answer
            code = _code_of(status, body)
            if code in TRANSIENT_CODES:
                store.release(k, fingerprint)
            else:
                try:
                    store.finish(k, fingerprint, status, body)
                except CoordinatorError:
                    # The change stands; a retry with this key waits for the pending claim to expire.
                    log.warning("could not record the answer of idempotency key %r", idem_key)
            state["settled"] = True
            return answer

        try:
            return await self._run(run)
        except RuntimeError:
            # The thread pool refused the call (it is shut down): nothing ran, so the claim is given back.
            if state["owned"] and not state["settled"]:
                store.release(k, fingerprint)
            raise ServiceError(
                "shutting_down",
                "The coordinator is shutting down; nothing was done. Retry against the restarted service.",
            ) from None

    # -- handlers -----------------------------------------------------------------------------------------
    async def op_read(self, route: Route, p: Principal, m: ReadRequest, scope: Any, h: Any) -> Answer:
        session = self._acting_session(p, m.session)
        s = self.coord.session(session, m.policy)
        return await self._run(lambda: self._call_engine(lambda: _fields(s.read(m.path, m.offset, m.limit))))

    async def op_write(self, route: Route, p: Principal, m: WriteRequest, scope: Any, h: Any) -> Answer:
        session = self._acting_session(p, m.session)
        s = self.coord.session(session, m.policy)
        return await self._mutate(route, session, m, h, lambda: _fields(s.write(m.path, m.content)))

    async def op_edit(self, route: Route, p: Principal, m: EditRequest, scope: Any, h: Any) -> Answer:
        session = self._acting_session(p, m.session)
        s = self.coord.session(session, m.policy)
        return await self._mutate(
            route, session, m, h, lambda: _fields(s.edit(m.path, m.old_string, m.new_string, m.replace_all))
        )

    async def op_multi_edit(self, route: Route, p: Principal, m: MultiEditRequest, scope: Any, h: Any) -> Answer:
        session = self._acting_session(p, m.session)
        s = self.coord.session(session, m.policy)
        edits = [e.model_dump() for e in m.edits]
        return await self._mutate(route, session, m, h, lambda: _fields(s.multi_edit(m.path, edits)))

    async def op_undo(self, route: Route, p: Principal, m: UndoRequest, scope: Any, h: Any) -> Answer:
        session = self._acting_session(p, m.session)
        s = self.coord.session(session, m.policy)

        def undo() -> dict[str, Any]:
            if not p.is_admin:
                self._check_undo_own(session, m.path, m.version)
            return _fields(s.undo(m.path, m.version))

        return await self._mutate(route, session, m, h, undo)

    def _check_undo_own(self, session: str, path: str, version: int | None) -> None:
        """A session token may undo only its own writes. An undo reverts one write's change and keeps every
        later write (undoing.py), so only the target matters: without a version it is the session's own
        newest write; a version written by another session needs the admin token."""
        if version is None:
            return
        target = next((e for e in self.coord.history(path) if e.version == version), None)
        if target is not None and target.session != session:
            raise ServiceError(
                "forbidden",
                f"Version {version} of {path} was written by another session ({target.session}); undoing it "
                "needs the admin token. Make the change with an edit instead.",
            )

    async def op_history(self, route: Route, p: Principal, m: HistoryRequest, scope: Any, h: Any) -> Answer:
        def history() -> dict[str, Any]:
            entries = self.coord.history(m.path)
            key = self.coord.resolve(m.path).key
            return {"path": key, "entries": [e.to_dict() for e in entries[: m.limit]]}

        return await self._run(lambda: self._call_engine(history))

    async def op_session(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        query = _query(scope)
        requested = query.get("session")
        if requested is not None and not _SESSION_RE.match(requested):
            raise _refusal(ErrorCode.INVALID_ARGUMENT, "session is not a valid session id.")
        session = self._acting_session(p, requested)
        store = self.coord.state

        def status() -> dict[str, Any]:
            score = store.last_seen(session)
            return {
                "session": session,
                "role": p.role,
                "token_expires_at": p.expires_at,
                "last_seen": None if score is None else float(score),
            }

        return await self._run(lambda: self._call_engine(status))

    async def op_sessions(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        store = self.coord.state
        return await self._run(
            lambda: self._call_engine(
                lambda: {"sessions": [{"session": s, "last_seen": t} for s, t in store.sessions()]}
            )
        )

    async def op_token(self, route: Route, p: Principal, m: TokenRequest, scope: Any, h: Any) -> Answer:
        token = mint_token(self._secret, session=m.session, ttl_s=m.ttl_s)
        principal = verify_token(self._secret, token)
        return 200, dumps({"token": token, "session": m.session, "expires_at": principal.expires_at}), []

    async def op_shutdown(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        self.draining = True
        target = self.config.supervisor_pid or os.getpid()
        # After the answer is on its way: the supervisor stops every worker gracefully (running calls end).
        asyncio.get_running_loop().call_later(0.05, _signal_quietly, target, signal.SIGTERM)
        body = {
            "status": "shutting_down",
            "message": "The service refuses new writes and stops once running calls have finished.",
        }
        return 202, dumps(body), []

    async def op_health(self, route: Route, p: None, m: None, scope: Any) -> Answer:
        def ping() -> bool:
            if self.coord is None:
                self.open()
            try:
                return bool(self.coord.redis.ping())
            except redis.RedisError:
                return False

        try:
            ok = await asyncio.get_running_loop().run_in_executor(self.executor, ping)
        except (CoordinatorError, RuntimeError):
            ok = False
        status = "draining" if self.draining else ("ok" if ok else "degraded")
        body = {"status": status, "version": __version__, "redis": ok, "draining": self.draining, "pid": os.getpid()}
        return (200 if status == "ok" else 503), dumps(body), []


def _refusal(code: ErrorCode, message: str, **details: Any) -> CoordinatorError:
    """A refusal by the HTTP layer that has a library code (so clients see the library's vocabulary)."""
    return CoordinatorError(code, message, **details)


def _body_too_large(size: int, limit: int) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.TOO_LARGE,
        f"The request body is {size} bytes, over this service's limit of {limit}; nothing was done. "
        "Send large content in several edits.",
        size=size,
        limit=limit,
    )


def _fields(result: Any) -> dict[str, Any]:
    """A result's fields as a dict, shallow (dataclasses.asdict deep-copies: ~0.1 ms per call, measured)."""
    names = _FIELD_NAMES.get(type(result))
    if names is None:
        names = _FIELD_NAMES[type(result)] = tuple(f.name for f in dataclasses.fields(result))
    return {n: getattr(result, n) for n in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _code_of(status: int, body: bytes) -> str | None:
    if status < 400:
        return None
    try:
        return str(json.loads(body).get("code"))
    except (ValueError, AttributeError):
        return None


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in scope.get("headers", ()):
        out.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
    return out


def _query(scope: dict[str, Any]) -> dict[str, str]:
    raw: bytes = scope.get("query_string", b"")
    try:
        parsed = parse_qs(raw.decode("ascii"), keep_blank_values=True, errors="strict", max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The query string is not valid.") from None
    return {k: v[0] for k, v in parsed.items()}


def _signal_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


def create_app(config: ServerConfig, secret: bytes | None = None) -> App:
    """The ASGI app. Without `secret`, it is loaded as `load_secret` describes (never created here)."""
    if secret is None:
        secret, _ = load_secret(config.root, config.secret_file, create=False)
    return App(config, secret)


def app_from_env() -> App:
    """Factory for uvicorn worker processes: the configuration comes from $EDIT_COORDINATOR_SERVER_CONFIG."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"${CONFIG_ENV} is not set; start the service with `edit-coordinator serve`.")
    return create_app(ServerConfig.from_json(raw))


# ---------------------------------------------------------------------------------------------------------
# Command line: `edit-coordinator serve` and `edit-coordinator token`
# ---------------------------------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP service",
        description="Serve the coordinator over HTTP/JSON (OpenAPI document at /openapi.json). Binds "
        "127.0.0.1 unless told otherwise. Every call but /v1/health needs a bearer token: see "
        "`edit-coordinator token`.",
    )
    p.add_argument("--root", default=".", help="repository root (default: the current folder)")
    p.add_argument("--redis-url", default=None, help="redis://, rediss:// or unix:// URL (default: embedded)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--secret-file", default=None, help=f"file holding the coordinator secret (or ${SECRET_ENV})")
    p.add_argument(
        "--durability", choices=("fsync", "none"), default="fsync", help="fsync every write (default) or not"
    )
    p.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for a file lock")
    p.add_argument("--max-body-bytes", type=int, default=16 * MiB, help="largest request body (default 16 MiB)")
    p.add_argument(
        "--max-path-chars", type=int, default=MAX_PATH_CHARS, help=f"longest path (default {MAX_PATH_CHARS})"
    )
    p.add_argument(
        "--max-string-chars",
        type=int,
        default=16 * MiB,
        help="longest content / old_string / new_string, in characters (default 16 Mi)",
    )
    p.add_argument("--max-edits", type=int, default=1000, help="most edits in one multi_edit")
    p.add_argument("--max-concurrency", type=int, default=64, help="requests in progress per worker")
    p.add_argument("--idempotency-ttl", type=int, default=24 * 3600, help="seconds answers are kept")
    p.add_argument("--graceful-timeout", type=float, default=30.0, help="seconds to let calls finish")
    p.add_argument(
        "--no-inline",
        action="store_true",
        help="run every engine call in the thread pool (default: on the event loop unless it must wait)",
    )
    p.add_argument("--url-file", default=None, help="write the service's URL to this file once listening")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=_cmd_serve)

    t = subparsers.add_parser(
        "token",
        help="print a bearer token for the HTTP service",
        description="Print a token signed with the coordinator secret of --root (the same one `serve` uses).",
    )
    t.add_argument("--root", default=".")
    t.add_argument("--secret-file", default=None)
    who = t.add_mutually_exclusive_group(required=True)
    who.add_argument("--session", help="a session token for this session id")
    who.add_argument("--admin", action="store_true", help="an admin token")
    t.add_argument("--ttl", type=int, default=24 * 3600, help="seconds until it expires (default 1 day)")
    t.set_defaults(func=_cmd_token)


def _cmd_token(args: argparse.Namespace) -> int:
    try:
        secret, _ = load_secret(args.root, args.secret_file, create=True)
        print(mint_token(secret, session=args.session, admin=args.admin, ttl_s=args.ttl))
    except CoordinatorError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return 0


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)  # connections queue from now on, before the workers are up
    sock.set_inheritable(True)
    return sock


def _cmd_serve(args: argparse.Namespace) -> int:
    import importlib.util

    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from .engine import Coordinator

    root = os.path.realpath(args.root)
    try:
        # Start (or find) the embedded Redis once, here, so that the workers share it from the start.
        with Coordinator(root, args.redis_url, durability=args.durability) as coord:
            redis_url = coord.redis_url
            coord.state.ping()
        _, secret_source = load_secret(root, args.secret_file, create=True)
        config = ServerConfig(
            root=root,
            redis_url=redis_url,
            durability=args.durability,
            lock_timeout=args.lock_timeout,
            secret_file=secret_source,
            max_body_bytes=args.max_body_bytes,
            max_path_chars=args.max_path_chars,
            max_string_chars=args.max_string_chars,
            max_edits=args.max_edits,
            max_concurrency=args.max_concurrency,
            idempotency_ttl_s=args.idempotency_ttl,
            supervisor_pid=os.getpid(),
            inline=not args.no_inline,
        )
        config.validate()
    except (CoordinatorError, ValueError) as exc:
        print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    if args.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: binding {args.host}: tokens travel in clear text over plain HTTP; put a TLS proxy in "
            "front of the service.",
            file=sys.stderr,
        )
    try:
        sock = _bind(args.host, args.port, backlog=2048)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    os.environ[CONFIG_ENV] = config.to_json()
    uv_config = uvicorn.Config(
        "coordinator.server:app_from_env",
        factory=True,
        workers=args.workers,
        lifespan="on",
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        access_log=args.access_log,
        log_level=args.log_level,
        timeout_graceful_shutdown=args.graceful_timeout,
        timeout_keep_alive=30,
        server_header=False,
        proxy_headers=False,
    )
    print(f"edit-coordinator serving {root} on {url} ({args.workers} workers; secret: "
          f"{secret_source or '$' + SECRET_ENV})", flush=True)  # fmt: skip
    if args.url_file:
        tmp = f"{args.url_file}.tmp"
        Path(tmp).write_text(url + "\n")
        os.replace(tmp, args.url_file)
    # uvicorn re-raises the signal that stopped it once it has shut down gracefully; with this handler in
    # place that is a normal exit (status 0), not death by SIGTERM.
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        if args.workers == 1:
            uvicorn.Server(uv_config).run(sockets=[sock])
        else:
            Multiprocess(uv_config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0
