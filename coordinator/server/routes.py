"""The service's routes, declared once: the router and the OpenAPI document are both made from `ROUTES`.

The routes of the `Client` operations are made from their declarations (coordinator/client/operations.py:
arguments, route, auth, `apply`); the request body is validated into the declaration itself, and its JSON
schema is the request schema. The App authenticates, validates, limits, runs `apply` (with idempotency for
mutating routes) and encodes the answer; a route whose rules go beyond that names its own App handler. The
service's own routes (tokens, dashboard, health, shutdown) are declared here, with pydantic models.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from coordinator.arguments import SESSION_PATTERN
from coordinator.client import operations as ops
from coordinator.client.operations import Auth, HttpRoute, Operation
from coordinator.engine import ReadResult
from coordinator.server.common import IDEMPOTENCY_KEY_PATTERN, STATUS_FOR_CODE
from coordinator.server.models import (
    DashboardResponse,
    DiffRequest,
    DiffResponse,
    ErrorResponse,
    EventsResponse,
    HealthResponse,
    HistoryResponse,
    HookAnswer,
    HookEvent,
    LeasesResponse,
    NoticesResponse,
    ReleaseResponse,
    ServerConfig,
    SessionsResponse,
    SessionStatusResponse,
    ShutdownResponse,
    TokenRequest,
    TokenResponse,
)
from coordinator.version import __version__

Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    name: str  # the operationId
    summary: str
    auth: Auth
    request: type[Any] | None  # an operation's declaration (validated directly), or a pydantic model
    response: type[Any]  # a pydantic model, or one of the engine's result dataclasses (no copy to drift)
    errors: tuple[int, ...]
    operation: type[Operation] | None = None  # run by `op_call` with `apply`, unless `own_handler`
    mutating: bool = False
    query: tuple[tuple[str, str], ...] = ()
    ok_status: int = 200
    tags: tuple[str, ...] = field(default=("files",))
    limited: bool = True  # counts against max_concurrency (shutdown does not: an overloaded service can be stopped)
    long_poll: bool = False  # may wait (seconds) for something to happen: runs in its own thread pool
    # A viewer token may call it (besides the tokens `auth` admits). Only inspection routes: a viewer changes
    # nothing and reads no file as a session (tests/coordinator/server/test_viewer.py lists them).
    viewer: bool = False
    own_handler: bool = False  # the App method `op_<name>` handles it (rules beyond authenticate-and-apply)
    schema: str = ""  # the request schema's name in the OpenAPI document

    @functools.cached_property
    def handler(self) -> str:
        """The App method that answers it (worked out once: it is looked up on every request)."""
        return "op_call" if self.operation is not None and not self.own_handler else f"op_{self.name}"

    @classmethod
    def of(cls, op: type[Operation], response: type[Any], own_handler: bool = False) -> Route:
        """The route of a declared operation (coordinator/client/operations.py)."""
        r = op.route
        query = tuple((name, SESSION_PATTERN) for name in r.query)  # a GET takes only the session
        return cls(
            r.method, r.path, r.operation_id or op.name, r.summary, op.auth, None if r.method == "GET" else op,
            response, r.errors,
            op, op.mutates, query, r.ok_status, r.tags, long_poll=op.long_poll, viewer=op.viewer,
            own_handler=own_handler, schema=op.schema,
        )  # fmt: skip

    @classmethod
    def service(
        cls, r: HttpRoute, name: str, auth: Auth, request: type[Any] | None, response: type[Any], **options: Any
    ) -> Route:
        """A route of the service's own (no Client operation), at the place `r` declares."""
        return cls(r.method, r.path, name, r.summary, auth, request, response, r.errors, ok_status=r.ok_status,
                   tags=r.tags, **options)  # fmt: skip


_AUTH_ERRORS = (401, 403)
_BODY_ERRORS = (413, 422)

# The answer models the OpenAPI document names for the operations whose result is no dataclass of the engine.
_RESPONSES: dict[type[Operation], type[Any]] = {
    ops.Read: ReadResult, ops.History: HistoryResponse, ops.LeaseOp: LeasesResponse, ops.Renew: LeasesResponse,
    ops.Release: ReleaseResponse, ops.Leases: LeasesResponse, ops.BreakLease: LeasesResponse,
    ops.PollEvents: EventsResponse, ops.RecentEvents: EventsResponse, ops.Notices: NoticesResponse,
    ops.Status: SessionStatusResponse,
}  # fmt: skip
# Operations with rules beyond authenticate-and-apply: undo (whose writes a session may revert), leases and
# status (the session from the query string; status adds the token's role).
_OWN_HANDLER = frozenset({ops.Undo, ops.Leases, ops.Status})


def _declared(op: type[Operation]) -> Route:
    return Route.of(op, _RESPONSES.get(op, op.result), own_handler=op in _OWN_HANDLER)


ROUTES: tuple[Route, ...] = (
    *(_declared(op) for op in ops.OPERATIONS),
    # The service's own routes (no Client operation behind them).
    Route.service(ops.SESSIONS_ROUTE, "sessions", "admin", None, SessionsResponse, viewer=True),
    Route.service(ops.TOKENS_ROUTE, "token", "admin", TokenRequest, TokenResponse),
    Route.service(ops.SHUTDOWN_ROUTE, "shutdown", "admin", None, ShutdownResponse, limited=False),
    Route("GET", "/v1/dashboard", "dashboard", "What the dashboard shows: health, sessions, leases, refusals, "
          "recent change events (admin or viewer)", "admin", None, DashboardResponse, (*_AUTH_ERRORS, 503),
          tags=("dashboard",), viewer=True),
    Route("POST", "/v1/dashboard/diff", "version_diff", "The unified diff of one recorded version of a file "
          "(admin or viewer)", "admin", DiffRequest, DiffResponse, (*_AUTH_ERRORS, *_BODY_ERRORS, 404, 503),
          tags=("dashboard",), viewer=True),
    Route.service(ops.HEALTH_ROUTE, "health", "none", None, HealthResponse),
    # Answered by server/hooks.py (the App matches its path by prefix): its refusals are in the body.
    Route.service(ops.HOOK_ROUTE, "hook", "any", HookEvent, HookAnswer, query=(("answer", "^(command|plain)$"),),
                  limited=False),
)  # fmt: skip
# The router's table: exact paths. A path with a {parameter} (the hook route) is matched by its handler.
ROUTE_BY_PATH: dict[str, dict[str, Route]] = {}
for _r in ROUTES:
    if "{" not in _r.path:
        ROUTE_BY_PATH.setdefault(_r.path, {})[_r.method] = _r


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def request_adapter(route: Route) -> TypeAdapter[Any]:
    """The validator of a route's request body (the operation's declaration, or a pydantic model), made once."""
    found = _ADAPTERS.get(route.name)
    if found is None:
        assert route.request is not None
        found = _ADAPTERS[route.name] = TypeAdapter(route.request)
    return found


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
        declared = getattr(model, "schema", None)  # an operation's schema name (a pydantic model's is a method)
        name = declared if isinstance(declared, str) and declared else model.__name__
        if name not in self.schemas:
            js = _plain_arrays(TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}"))
            for sub_name, sub in js.pop("$defs", {}).items():
                self.schemas.setdefault(sub_name, sub)
            props = js.get("properties", {})
            if "path" in props and props["path"].get("type") == "string":
                props["path"]["maxLength"] = self.cfg.max_path_chars
            js["title"] = name
            self.schemas[name] = js
        return {"$ref": f"#/components/schemas/{name}"}

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
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"\{(\w+)\}", route.path)
    ]
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
