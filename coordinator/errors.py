"""Errors are data: a stable code and a message written for the model that made the call.

Every refusal anywhere in the package is a `CoordinatorError`. The invariant enforced by the engine is that
nothing has been written when one is raised. Adapters (HTTP, MCP, CLI) translate the code; they never
invent their own.
"""

from __future__ import annotations

import re
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
    PLACEHOLDER = "placeholder"


_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` as valid UTF-8: a lone surrogate (a file name's undecodable byte, kept by Python as U+DC80 to
    U+DCFF) is written as the escape of that byte, `\\xe9`; any other lone surrogate as `\\udXXX`."""
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_escape_surrogate, text)


def _escape_surrogate(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return f"\\x{cp - 0xDC00:02x}" if 0xDC80 <= cp <= 0xDCFF else f"\\u{cp:04x}"


def _printable_value(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_printable_value(v) for v in value]
    if type(value) is tuple:
        return tuple(_printable_value(v) for v in value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: _printable_value(v) for k, v in value.items()}
    return value


class CoordinatorError(Exception):
    """A refusal. `code` is an `ErrorCode`; `message` says what went wrong and what to do next.

    `details` carries machine-readable context (counts, line numbers, hints) for adapters.
    Invariant: the message and every text in the details are valid UTF-8 (see `printable`), whatever file
    names they quote, so that every adapter can hand them to a model or a terminal as they are.
    """

    def __init__(self, code: ErrorCode, message: str, **details: Any) -> None:
        self._message = printable(message)
        super().__init__(f"[{code.value}] {self._message}")
        self.code = code
        self.details = _printable_value(details)

    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        self._message = printable(value)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "details": _printable_value(self.details)}

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep errors picklable across process boundaries (worker fleets, multiprocessing).
        return (_rebuild, (self.code.value, self.message, self.details))


def _rebuild(code: str, message: str, details: dict[str, Any]) -> CoordinatorError:
    return CoordinatorError(ErrorCode(code), message, **details)
