"""Bearer tokens: the format and the signature, shared by the client (which mints its own from a secret) and
the service (which verifies them, coordinator.server.auth). A ground module, so neither imports the other."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any, Literal

from coordinator.arguments import is_session_id
from coordinator.errors import CoordinatorError, ErrorCode

TOKEN_VERSION = "ec1"
Role = Literal["session", "admin", "viewer"]
ROLES: tuple[Role, ...] = ("session", "admin", "viewer")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signing_key(secret: bytes) -> bytes:
    # A derived key: the raw secret is used for nothing else, so another use of it cannot forge tokens.
    return hmac.new(secret, b"edit-coordinator/token/v1", hashlib.sha256).digest()


def mint_token(
    secret: bytes, *, session: str | None = None, admin: bool = False, viewer: bool = False, ttl_s: float = 24 * 3600
) -> str:
    """A signed token. A session token (neither admin nor viewer) needs `session` and acts only as it; an admin
    token acts as anyone; a viewer token names no session and may only call the service's inspection routes
    (read-only: it can change nothing and read no file as a session; coordinator.server.routes says which)."""
    if admin and viewer:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "A token is either an admin token or a viewer token.")
    role: Role = "admin" if admin else "viewer" if viewer else "session"
    if role == "session" and (session is None or not is_session_id(session)):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "A session token needs a session id of 1-200 characters from letters, digits and . _ : @ + / = -",
        )
    payload: dict[str, Any] = {"r": role, "e": int(time.time() + ttl_s)}
    if role == "session":
        payload["s"] = session
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    signed = f"{TOKEN_VERSION}.{body}"
    return f"{signed}.{_b64(signature_of(secret, signed))}"


def claimed_session(token: str) -> str | None:
    """The session a session token names, read without checking its signature (the service checks it): what a
    client acts as when it is given a session token and no session. None for an admin or viewer token, or no token."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_VERSION:
        return None
    try:
        payload = json.loads(unb64(parts[1]))
    except (ValueError, TypeError):
        return None
    session = payload.get("s") if isinstance(payload, dict) and payload.get("r") == "session" else None
    return session if isinstance(session, str) and is_session_id(session) else None


def signature_of(secret: bytes, signed: str) -> bytes:
    """HMAC-SHA256 of a token's signed part under the key derived from the coordinator secret."""
    return hmac.new(_signing_key(secret), signed.encode(), hashlib.sha256).digest()
