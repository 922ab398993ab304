"""What every part of the service shares: names of its settings, its own refusals, JSON encoding.

One code, one status: `STATUS_FOR_CODE` and the retry rules are read from `coordinator.errors.CODES`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pydantic_core

from coordinator import errors
from coordinator.errors import CoordinatorError, ErrorCode

KiB = 1024
MiB = 1024 * KiB

CONFIG_ENV = "EDIT_COORDINATOR_SERVER_CONFIG"
SECRET_ENV = "EDIT_COORDINATOR_SECRET"
SECRET_FILE_ENV = "EDIT_COORDINATOR_SECRET_FILE"
SECRET_FILE_NAME = "server.secret"
MIN_SECRET_BYTES = 16
OPENAPI_PATH = "/openapi.json"

IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
IDEM_RE = re.compile(IDEMPOTENCY_KEY_PATTERN)

# Hard caps of the request models. The configured limits (ServerConfig) may be lower, never higher; the
# OpenAPI document shows the configured ones.

STATUS_FOR_CODE: dict[str, int] = {code: row.http_status for code, row in errors.CODES.items()}
SERVICE_CODES = errors.SERVICE_CODES
# Answers that mean "nothing was done; the same call may succeed later": never kept for idempotent replay.
TRANSIENT_CODES = frozenset(code for code, row in errors.CODES.items() if row.retryable)
RETRY_AFTER_S = {code: row.retry_after_s for code, row in errors.CODES.items() if row.retry_after_s is not None}
UNMAPPED_STATUS = errors.UNKNOWN.http_status


class ServiceError(Exception):
    """A refusal by the service itself (authentication, limits, routing, idempotency)."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        assert code in SERVICE_CODES, code
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
    return errors.info(code).http_status


def refusal(code: ErrorCode, message: str, **details: Any) -> CoordinatorError:
    """A refusal by the HTTP layer that has a library code (so clients see the library's vocabulary)."""
    return CoordinatorError(code, message, **details)


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


def error_answer(exc: ServiceError | CoordinatorError, root: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """A refusal as the service answers it: its status, its JSON body (paths made `public`), and the headers
    its code asks for (Retry-After, WWW-Authenticate, Connection: close after a body too large)."""
    code = exc.code.value if isinstance(exc, CoordinatorError) else exc.code
    extra: list[tuple[bytes, bytes]] = []
    status = status_for(code)
    if code in RETRY_AFTER_S:
        extra.append((b"retry-after", str(RETRY_AFTER_S[code]).encode()))
    if status == 401:
        extra.append((b"www-authenticate", b'Bearer realm="edit-coordinator"'))
    if status == 413:
        extra.append((b"connection", b"close"))
    return status, dumps(public(exc.to_dict(), root)), extra


def public(obj: Any, root: str) -> Any:
    """Invariant 5: no server path leaves the service. The root's own path, wherever it appears in a
    refusal (message or details), is replaced by the path relative to it."""
    root = root.rstrip("/")
    if isinstance(obj, str):
        return obj.replace(root + "/", "").replace(root, ".") if root in obj else obj
    if isinstance(obj, dict):
        return {k: public(v, root) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [public(v, root) for v in obj]
    return obj
