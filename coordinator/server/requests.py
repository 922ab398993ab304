"""Reading a request: headers, query, body (within the limits), and the limits on the validated model."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from pydantic import ValidationError

from coordinator.arguments import is_session_id
from coordinator.client.operations import Edit, MultiEdit, Write
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.server.common import refusal
from coordinator.server.models import ServerConfig


class Disconnected(Exception):
    """The client went away before its request was read."""


def validation_message(exc: ValidationError, where: str) -> tuple[str, list[dict[str, Any]]]:
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


def body_too_large(size: int, limit: int) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.TOO_LARGE,
        f"The request body is {size} bytes, over this service's limit of {limit}; nothing was done. "
        "Send large content in several edits.",
        size=size,
        limit=limit,
    )


async def read_body(headers: dict[str, str], receive: Any, limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise refusal(ErrorCode.INVALID_ARGUMENT, "Content-Length is not a number.")
        if int(declared) > limit:
            raise body_too_large(int(declared), limit)
    message = await receive()
    if message["type"] == "http.disconnect":
        raise Disconnected
    first: bytes = message.get("body", b"")
    if len(first) > limit:
        raise body_too_large(len(first), limit)
    if not message.get("more_body", False):
        return first  # the usual request: its whole body in one message
    chunks: list[bytes] = [first] if first else []
    total = len(first)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        if chunk:
            total += len(chunk)
            if total > limit:
                raise body_too_large(total, limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def check_limits(cfg: ServerConfig, model: Any) -> None:
    """The configured limits (lower than the models' hard caps) on paths, strings and edit counts."""
    path = getattr(model, "path", None)
    if isinstance(path, str) and len(path) > cfg.max_path_chars:
        raise refusal(
            ErrorCode.INVALID_ARGUMENT,
            f"path is {len(path)} characters long, over this service's limit of {cfg.max_path_chars}.",
        )
    for name, value in _strings(cfg, model):
        if len(value) > cfg.max_string_chars:
            raise refusal(
                ErrorCode.TOO_LARGE,
                f"{name} is {len(value)} characters long, over this service's limit of "
                f"{cfg.max_string_chars}; nothing was done.",
            )


def _strings(cfg: ServerConfig, model: Any) -> list[tuple[str, str]]:
    if isinstance(model, Write):
        return [("content", model.content)]
    if isinstance(model, Edit):
        return [("old_string", model.old_string), ("new_string", model.new_string)]
    if not isinstance(model, MultiEdit):
        return []
    if len(model.edits) > cfg.max_edits:
        raise refusal(
            ErrorCode.INVALID_ARGUMENT,
            f"{len(model.edits)} edits in one multi_edit, over this service's limit of {cfg.max_edits}; split "
            "them into several calls.",
        )
    out: list[tuple[str, str]] = []
    for i, e in enumerate(model.edits):
        out += [(f"edits[{i}].old_string", e.old_string), (f"edits[{i}].new_string", e.new_string)]
    return out


def header_map(scope: dict[str, Any]) -> dict[str, str]:
    """The request's headers by lower-case name; of a repeated header, the first."""
    headers = scope.get("headers", ())
    if not isinstance(headers, list | tuple):
        headers = list(headers)
    # Taken last to first, so that the first of a repeated name is the one kept.
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers[::-1]}


def query_map(scope: dict[str, Any]) -> dict[str, str]:
    raw: bytes = scope.get("query_string", b"")
    try:
        parsed = parse_qs(raw.decode("ascii"), keep_blank_values=True, errors="strict", max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The query string is not valid.") from None
    return {k: v[0] for k, v in parsed.items()}


def query_session(scope: dict[str, Any]) -> str | None:
    requested = query_map(scope).get("session")
    if requested is not None and not is_session_id(requested):
        raise refusal(ErrorCode.INVALID_ARGUMENT, "session is not a valid session id.")
    return requested
