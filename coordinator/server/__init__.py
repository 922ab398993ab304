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
