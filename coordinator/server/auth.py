"""Authentication: the coordinator secret and the bearer tokens it signs.

A coordinator secret (``--secret-file``, ``$EDIT_COORDINATOR_SECRET``, ``$EDIT_COORDINATOR_SECRET_FILE``,
or one generated on first use in ``<state dir>/server.secret``) signs tokens with HMAC-SHA256. A session
token names one session id and an expiry; whoever holds it acts as that session and no other. An admin
token may act as any session. A viewer token names no session and may call only the routes declared open
to it (`Route.viewer`: inspection, nothing that changes state or reads a file as a session), such as the
dashboard's.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.server.common import (
    MIN_SECRET_BYTES,
    SECRET_ENV,
    SECRET_FILE_ENV,
    SECRET_FILE_NAME,
    ServiceError,
)
from coordinator.tokens import ROLES, TOKEN_VERSION, Role, signature_of, unb64


@dataclass(frozen=True)
class Principal:
    """Who is calling: a session (acting only as `session`), the admin (acting as anyone), or a viewer
    (acting as nobody: inspection routes only)."""

    role: Role
    session: str | None
    expires_at: float

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def is_viewer(self) -> bool:
        return self.role == "viewer"


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
    want = signature_of(secret, signed)
    try:
        got = unb64(parts[2])
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
        payload = json.loads(unb64(parts[1]))
        role = payload["r"]
        exp = float(payload["e"])
        session = payload.get("s")
        if role not in ROLES or (role == "session" and not isinstance(session, str)):
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
    from coordinator.disk.layout import state_dir_of

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
