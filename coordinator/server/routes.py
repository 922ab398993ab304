"""The service's routes, declared once: the router and the OpenAPI document are both made from `ROUTES`.

Most routes are one line: the request model, the answer model, and `call`, a function of (client,
session, request) on the `coordinator.Client` interface. The App authenticates, validates, limits, runs
`call` (with idempotency for mutating routes) and encodes the answer; a route whose rules go beyond that
names its own App handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from coordinator.engine import ReadResult, WriteResult
from coordinator.git.commit import CommitResult
from coordinator.server.common import IDEMPOTENCY_KEY_PATTERN, SESSION_PATTERN, STATUS_FOR_CODE
from coordinator.server.models import (
    BreakLeaseRequest,
    CommitRequest,
    DashboardResponse,
    DiffRequest,
    DiffResponse,
    EditRequest,
    ErrorResponse,
    EventsRequest,
    EventsResponse,
    HealthResponse,
    HistoryRequest,
    HistoryResponse,
    LeaseRequest,
    LeasesResponse,
    MultiEditRequest,
    NoticesRequest,
    NoticesResponse,
    ReadRequest,
    RecentEventsRequest,
    RedoRequest,
    ReleaseRequest,
    ReleaseResponse,
    RenewRequest,
    RestoreRequest,
    ServerConfig,
    SessionsResponse,
    SessionStatusResponse,
    ShutdownResponse,
    TokenRequest,
    TokenResponse,
    UndoRequest,
    WriteRequest,
)
from coordinator.version import __version__

Auth = Literal["none", "any", "admin"]
Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
Call = Callable[[Any, Any, Any], Any]  # (client, acting session or None, request model) -> result


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    name: str  # the operationId
    summary: str
    auth: Auth
    request: type[BaseModel] | None
    response: type[Any]  # a pydantic model, or one of the engine's result dataclasses (no copy to drift)
    errors: tuple[int, ...]
    call: Call | None = None  # on the Client interface; None: the App method `op_<name>` handles the route
    mutating: bool = False
    query: tuple[tuple[str, str], ...] = ()
    ok_status: int = 200
    tags: tuple[str, ...] = field(default=("files",))
    limited: bool = True  # counts against max_concurrency (shutdown does not: an overloaded service can be stopped)
    long_poll: bool = False  # may wait (seconds) for something to happen: runs in its own thread pool
    # A viewer token may call it (besides the tokens `auth` admits). Only inspection routes: a viewer changes
    # nothing and reads no file as a session (tests/coordinator/server/test_viewer.py lists them).
    viewer: bool = False

    @property
    def handler(self) -> str:
        return "op_call" if self.call is not None else f"op_{self.name}"


_AUTH_ERRORS = (401, 403)
_BODY_ERRORS = (413, 422)
_FILE_ERRORS = (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503)
_WRITE_ERRORS = (*_FILE_ERRORS, 409, 423)
_STATE_ERRORS = (*_AUTH_ERRORS, *_BODY_ERRORS, 503)


def _history(c: Any, s: Any, m: HistoryRequest) -> dict[str, Any]:
    entries = c.history(m.path, m.limit)
    return {"path": c.coord.resolve(m.path).key, "entries": [e.to_dict() for e in entries]}


def _leases(found: list[Any]) -> dict[str, Any]:
    return {"leases": [x.to_dict() for x in found]}


def _recent(found: list[Any]) -> dict[str, Any]:
    return {"events": [e.to_dict() for e in found], "cursor": found[-1].id if found else "0-0"}


def _notice(found: Any) -> dict[str, Any]:
    if found is None:
        return {"notice": None}
    return {"notice": {"paths": list(found.paths), "writers": list(found.writers), "text": found.text}}


ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/read", "read", "Read lines of a text file", "any", ReadRequest, ReadResult,
          (*_FILE_ERRORS, 409, 423), lambda c, s, m: c.read(s, m.path, m.offset, m.limit)),
    Route("POST", "/v1/write", "write", "Create or overwrite a file", "any", WriteRequest, WriteResult,
          _WRITE_ERRORS, lambda c, s, m: c.write(s, m.path, m.content), mutating=True),
    Route("POST", "/v1/edit", "edit", "Replace old_string with new_string", "any", EditRequest, WriteResult,
          _WRITE_ERRORS, lambda c, s, m: c.edit(s, m.path, m.old_string, m.new_string, m.replace_all),
          mutating=True),
    Route("POST", "/v1/multi_edit", "multi_edit", "Several edits of one file, all or nothing", "any",
          MultiEditRequest, WriteResult, _WRITE_ERRORS,
          lambda c, s, m: c.multi_edit(s, m.path, [e.model_dump() for e in m.edits]), mutating=True),
    Route("POST", "/v1/undo", "undo", "Revert one recorded write's change, keeping later writes (a session "
          "token: its own writes only)", "any", UndoRequest, WriteResult, _WRITE_ERRORS, mutating=True),
    Route("POST", "/v1/redo", "redo", "Bring back the change of the session's newest undo of a file", "any",
          RedoRequest, WriteResult, _WRITE_ERRORS, lambda c, s, m: c.redo(s, m.path), mutating=True),
    Route("POST", "/v1/commit", "commit", "A git commit of exactly the session's uncommitted writes; the "
          "working tree and other sessions' changes stay as they are", "any", CommitRequest, CommitResult,
          (*_STATE_ERRORS, 409), lambda c, s, m: c.commit(s, m.message, m.include_others), mutating=True,
          tags=("git",)),
    Route("POST", "/v1/admin/restore", "restore", "Put a whole file back as it was at a version, discarding "
          "every later version; the answer's `discarded` lists them (admin)", "admin", RestoreRequest,
          WriteResult, _WRITE_ERRORS,
          lambda c, s, m: c.restore(m.path, m.to_version, before_version=m.before_version, session=s),
          mutating=True, tags=("admin",)),
    # Any token: a session may see the history of every file of the repository (docs/http.md, "Tokens").
    Route("POST", "/v1/history", "history", "Recorded versions of a file, newest first: who wrote which lines "
          "when (no contents)", "any", HistoryRequest, HistoryResponse, (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503),
          _history, viewer=True),
    Route("POST", "/v1/leases", "lease", "Reserve paths or globs for a while, all or none", "any", LeaseRequest,
          LeasesResponse, (*_STATE_ERRORS, 423), lambda c, s, m: _leases(c.lease(s, m.paths, m.mode, m.ttl_s)),
          tags=("leases",)),
    Route("POST", "/v1/leases/renew", "renew", "Extend one or all of the session's leases", "any",
          RenewRequest, LeasesResponse, (*_STATE_ERRORS, 423),
          lambda c, s, m: _leases(c.renew(s, m.lease_id, m.ttl_s)), tags=("leases",)),
    Route("POST", "/v1/leases/release", "release", "End the session's leases (one, on a pattern, or all)",
          "any", ReleaseRequest, ReleaseResponse, _STATE_ERRORS,
          lambda c, s, m: {"released": c.release(s, m.lease_id, m.pattern)}, tags=("leases",)),
    Route("GET", "/v1/leases", "leases", "Live leases (all, or one session's with ?session=)", "any", None,
          LeasesResponse, _STATE_ERRORS, query=(("session", SESSION_PATTERN),), tags=("leases",), viewer=True),
    Route("POST", "/v1/admin/leases/break", "break_lease", "End a lease, or all of a session's, whoever holds "
          "it (admin)", "admin", BreakLeaseRequest, LeasesResponse, _STATE_ERRORS,
          lambda c, s, m: _leases(c.break_lease(m.lease_id, m.session)), tags=("admin",)),
    Route("POST", "/v1/events", "events", "Change events after a cursor; waits up to wait_s for the first "
          "(long poll)", "any", EventsRequest, EventsResponse, _STATE_ERRORS,
          lambda c, s, m: c.poll_events(m.since, m.paths, m.wait_s, m.limit).to_dict(), tags=("events",),
          long_poll=True, viewer=True),
    Route("POST", "/v1/events/recent", "recent_events", "The newest change events, oldest first", "any",
          RecentEventsRequest, EventsResponse, _STATE_ERRORS, lambda c, s, m: _recent(c.recent_events(m.count)),
          tags=("events",), viewer=True),
    Route("POST", "/v1/notices", "notices", "Files the session read that others have written since", "any",
          NoticesRequest, NoticesResponse, _STATE_ERRORS, lambda c, s, m: _notice(c.notices(s)),
          tags=("sessions",)),
    Route("GET", "/v1/session", "session", "The calling session's status and leases", "any", None,
          SessionStatusResponse, (*_AUTH_ERRORS, 422, 503), query=(("session", SESSION_PATTERN),),
          tags=("sessions",)),
    Route("GET", "/v1/sessions", "sessions", "Sessions seen recently (admin or viewer)", "admin",
          None, SessionsResponse, (*_AUTH_ERRORS, 503), tags=("admin",), viewer=True),
    Route("POST", "/v1/tokens", "token", "Issue a session or viewer token (admin)", "admin", TokenRequest,
          TokenResponse, (*_AUTH_ERRORS, *_BODY_ERRORS), tags=("admin",)),
    Route("POST", "/v1/admin/shutdown", "shutdown", "Stop the service gracefully (admin)", "admin", None,
          ShutdownResponse, _AUTH_ERRORS, ok_status=202, tags=("admin",), limited=False),
    Route("GET", "/v1/dashboard", "dashboard", "What the dashboard shows: health, sessions, leases, refusals, "
          "recent change events (admin or viewer)", "admin", None, DashboardResponse, (*_AUTH_ERRORS, 503),
          tags=("dashboard",), viewer=True),
    Route("POST", "/v1/dashboard/diff", "version_diff", "The unified diff of one recorded version of a file "
          "(admin or viewer)", "admin", DiffRequest, DiffResponse, (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503),
          tags=("dashboard",), viewer=True),
    Route("GET", "/v1/health", "health", "Liveness and Redis reachability (no token needed)", "none",
          None, HealthResponse, (503,), tags=("service",)),
)  # fmt: skip
ROUTE_BY_PATH: dict[str, dict[str, Route]] = {}
for _r in ROUTES:
    ROUTE_BY_PATH.setdefault(_r.path, {})[_r.method] = _r


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


_IDEMPOTENCY_PARAM = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Retry safely: a repeated call with the same key returns the first answer instead of "
    "applying the change twice.",
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
}


class _Schemas:
    """The components/schemas section, filled as routes refer to models."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.schemas: dict[str, Any] = {}

    def ref(self, model: type[Any]) -> dict[str, str]:
        if model.__name__ not in self.schemas:
            js = _plain_arrays(TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}"))
            for name, sub in js.pop("$defs", {}).items():
                self.schemas.setdefault(name, sub)
            props = js.get("properties", {})
            if "path" in props and props["path"].get("type") == "string":
                props["path"]["maxLength"] = self.cfg.max_path_chars
            self.schemas[model.__name__] = js
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def bound_strings(self) -> None:
        """The request's string fields are bounded by the configured limits too."""
        for name in ("WriteRequest", "EditRequest", "EditItem"):
            for prop, sub in self.schemas.get(name, {}).get("properties", {}).items():
                if prop in ("content", "old_string", "new_string"):
                    sub["maxLength"] = self.cfg.max_string_chars
        if "MultiEditRequest" in self.schemas:
            self.schemas["MultiEditRequest"]["properties"]["edits"]["maxItems"] = self.cfg.max_edits


def _operation(route: Route, schemas: _Schemas, error_ref: dict[str, str]) -> dict[str, Any]:
    ok = {"description": "Success", "content": {"application/json": {"schema": schemas.ref(route.response)}}}
    op: dict[str, Any] = {
        "operationId": route.name,
        "summary": route.summary,
        "tags": list(route.tags),
        "responses": {str(route.ok_status): ok},
    }
    if route.auth == "none":
        op["security"] = []
    params: list[dict[str, Any]] = [_IDEMPOTENCY_PARAM] if route.mutating else []
    params += [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string", "pattern": pattern}}
        for name, pattern in route.query
    ]
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schemas.ref(route.request)}}}
    statuses = set(route.errors) | ({429} if route.limited and route.auth != "none" else set())
    for status in sorted(statuses):
        codes = sorted(c for c, s in STATUS_FOR_CODE.items() if s == status)
        op["responses"][str(status)] = {
            "description": "Refused: " + ", ".join(codes),
            "content": {"application/json": {"schema": error_ref}},
        }
    return op


def openapi_document(config: ServerConfig | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service, generated from ROUTES and the pydantic models."""
    schemas = _Schemas(config or ServerConfig(root="."))
    error_ref = schemas.ref(ErrorResponse)
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, schemas, error_ref)
    schemas.bound_strings()
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
            "schemas": schemas.schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
