"""The coordinator as an HTTP/JSON service: `edit-coordinator serve`.

An adapter over the `Client` interface: it authenticates, validates, limits and translates; the engine
decides. Every route, its request, its authentication and the statuses it may answer with are declared
once: the `Client` operations' routes are made from their declarations (coordinator/client/operations.py),
the service's own are written in `routes.ROUTES`; the router and the OpenAPI document are both made from
that table. Every error code's status comes from `coordinator.errors.CODES`.

Stack (measured, see docs/http.md): a plain ASGI application (no framework) on uvicorn with httptools and
uvloop, several worker processes sharing one listening socket (supervisor.py). Request bodies are validated
by pydantic straight from bytes; engine calls run in a thread pool.

Modules: common (settings, service refusals, JSON), models (answers, the service's own requests,
ServerConfig), auth (secret and tokens), idempotency, routes (the table and the OpenAPI document),
requests (reading a request), app (the ASGI application), supervisor and worker (several processes).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.server.app import App, app_from_env, create_app
    from coordinator.server.auth import Principal, load_secret, state_dir_of, verify_token
    from coordinator.server.common import (
        CONFIG_ENV,
        OPENAPI_PATH,
        RETRY_AFTER_S,
        SECRET_ENV,
        SECRET_FILE_ENV,
        SERVICE_CODES,
        STATUS_FOR_CODE,
        TRANSIENT_CODES,
        ServiceError,
        status_for,
    )
    from coordinator.server.idempotency import IdempotencyStore
    from coordinator.server.models import ServerConfig
    from coordinator.server.routes import ROUTES, Route, openapi_document
    from coordinator.tokens import mint_token

# The names above are loaded on first use (PEP 562): a command of the CLI that only needs `auth` or `common`
# (every command builds the whole parser, `serve`'s options included) then does not pay for the ASGI
# application, its pydantic models and its metrics on each start (about 0.2 s of every process's start-up).
_HOMES = {
    "App": "coordinator.server.app",
    "app_from_env": "coordinator.server.app",
    "create_app": "coordinator.server.app",
    "Principal": "coordinator.server.auth",
    "load_secret": "coordinator.server.auth",
    "state_dir_of": "coordinator.server.auth",
    "verify_token": "coordinator.server.auth",
    "CONFIG_ENV": "coordinator.server.common",
    "OPENAPI_PATH": "coordinator.server.common",
    "RETRY_AFTER_S": "coordinator.server.common",
    "SECRET_ENV": "coordinator.server.common",
    "SECRET_FILE_ENV": "coordinator.server.common",
    "SERVICE_CODES": "coordinator.server.common",
    "STATUS_FOR_CODE": "coordinator.server.common",
    "TRANSIENT_CODES": "coordinator.server.common",
    "ServiceError": "coordinator.server.common",
    "status_for": "coordinator.server.common",
    "IdempotencyStore": "coordinator.server.idempotency",
    "ServerConfig": "coordinator.server.models",
    "ROUTES": "coordinator.server.routes",
    "Route": "coordinator.server.routes",
    "openapi_document": "coordinator.server.routes",
    "mint_token": "coordinator.tokens",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "CONFIG_ENV",
    "OPENAPI_PATH",
    "RETRY_AFTER_S",
    "ROUTES",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "SERVICE_CODES",
    "STATUS_FOR_CODE",
    "TRANSIENT_CODES",
    "App",
    "IdempotencyStore",
    "Principal",
    "Route",
    "ServerConfig",
    "ServiceError",
    "app_from_env",
    "create_app",
    "load_secret",
    "mint_token",
    "openapi_document",
    "state_dir_of",
    "status_for",
    "verify_token",
]
