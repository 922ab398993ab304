"""Argument rules, checked once: every way in (library, HTTP, MCP, command line) calls these."""

from __future__ import annotations

import re

from .errors import CoordinatorError, ErrorCode

POLICIES: tuple[str, ...] = ("strict", "rebase")
_SESSION_RE = re.compile(r"^[A-Za-z0-9._:@+/=-]{1,200}$")


def check_policy(policy: object) -> None:
    if policy not in POLICIES:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"Unknown policy {policy!r}; use 'strict' (the default) or 'rebase'."
        )


def check_session_id(session_id: object) -> None:
    if not isinstance(session_id, str) or not _SESSION_RE.match(session_id):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "A session id is 1-200 characters from letters, digits and . _ : @ + / = -",
        )


def opt_int(v: object, name: str, minimum: int) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a whole number or omitted.")
    if v < minimum:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be at least {minimum}; got {v}.")
    return v


def check_text(v: object, name: str, limit: int) -> str:
    if not isinstance(v, str):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a string.")
    if len(v) > limit:
        raise CoordinatorError(ErrorCode.TOO_LARGE, f"{name} is longer than the limit of {limit} characters.")
    if "\x00" in v:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} contains a NUL byte; text files cannot hold one.")
    return v
