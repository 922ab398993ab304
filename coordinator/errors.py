"""Errors are data: a stable code and a message written for the model that made the call.

Every refusal anywhere in the package is a `CoordinatorError`. The invariant enforced by the engine is that
nothing has been written when one is raised. Adapters (HTTP, MCP, CLI) translate the code; they never
invent their own.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Stable error codes. The values are public: clients match on them."""

    NOT_READ = "not_read"
    STALE = "stale"
    NO_MATCH = "no_match"
    AMBIGUOUS = "ambiguous"
    NO_CHANGE = "no_change"
    FILE_EXISTS = "file_exists"
    FILE_NOT_FOUND = "file_not_found"
    IS_DIRECTORY = "is_directory"
    BINARY_FILE = "binary_file"
    SPECIAL_FILE = "special_file"
    TOO_LARGE = "too_large"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    OUTSIDE_ROOT = "outside_root"
    PERMISSION_DENIED = "permission_denied"
    LOCK_TIMEOUT = "lock_timeout"
    STATE_UNAVAILABLE = "state_unavailable"
    INVALID_ARGUMENT = "invalid_argument"
    LEASED = "leased"
    IO_ERROR = "io_error"


class CoordinatorError(Exception):
    """A refusal. `code` is an `ErrorCode`; `message` says what went wrong and what to do next.

    `details` carries machine-readable context (counts, line numbers, hints) for adapters.
    """

    def __init__(self, code: ErrorCode, message: str, **details: Any) -> None:
        super().__init__(f"[{code.value}] {message}")
        self.code = code
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "details": self.details}

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep errors picklable across process boundaries (worker fleets, multiprocessing).
        return (_rebuild, (self.code.value, self.message, self.details))


def _rebuild(code: str, message: str, details: dict[str, Any]) -> CoordinatorError:
    return CoordinatorError(ErrorCode(code), message, **details)
