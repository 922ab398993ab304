"""Errors are data: a stable code and a message written for the model that made the call.

Every refusal anywhere in the package is a `CoordinatorError`. The invariant enforced by the engine is that
nothing has been written when one is raised. Adapters (HTTP, MCP, CLI) translate the code; they never
invent their own.

`CODES` is the one table of what each code means to every adapter: its HTTP status, whether the identical
call may be retried (and after how long), the guidance a model gets, and the command line's exit status.
The HTTP service, `HttpClient`, the MCP server and the command line all read it; nothing else maps codes.
The HTTP service's own refusals (authentication, limits, idempotency) have rows too, each naming the
library code a client raises for it (`library`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
    CHECK_FAILED = "check_failed"


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


@dataclass(frozen=True)
class CodeInfo:
    """What one code means to the adapters.

    retryable: nothing was done and the identical call may succeed shortly. The service does not keep such
        an answer for idempotent replay, and `HttpClient` sends the call again (same Idempotency-Key) after
        `retry_after_s`, within its retry budget. Every other refusal needs a different call (read again,
        fix the arguments, wait for a lease) and is final.
    exit_status: the command line's exit status for this refusal (documented in `edit-coordinator --help`).
    library: the library code a client raises for a service code (the service's code goes in
        `details["service_code"]`); a library code's row names itself.
    """

    code: str
    http_status: int
    guidance: str
    retryable: bool = False
    retry_after_s: int | None = None
    exit_status: int = 1
    library: ErrorCode | None = None


def _row(code: str, status: int, exit_status: int, guidance: str, retry_after_s: int | None = None) -> CodeInfo:
    library = ErrorCode(code) if code in ErrorCode._value2member_map_ else None
    return CodeInfo(code, status, guidance, retry_after_s is not None, retry_after_s, exit_status, library)


# Exit statuses: 1 refused because of the file's state (read again), 2 bad arguments, 3 the path,
# 4 a lease or lock held by another session, 5 the coordination state or the service could not be reached,
# 6 the disk failed, 7 the content (no match, ambiguous, placeholder ...), 8 the token (a service's
# authentication: missing, malformed, expired, or not one the call takes). 0 success; 130 interrupted.
_LIBRARY_ROWS = (
    _row("not_read", 409, 1, "you have not read this file in this session (or that read expired, or the "
         "coordination state was reset): call read_file on it, then make your change."),
    _row("stale", 409, 1, "the file changed since you last read or wrote it (another agent or an outside "
         "program edited it): call read_file again and redo your change on the current content. Do not repeat "
         "the same call unchanged."),
    _row("file_exists", 409, 7, "old_string is empty but the file has content: give the text to replace, or "
         "use write_file (after read_file) to replace the whole file."),
    _row("no_match", 422, 7, "old_string is not in the file: read the file again and copy the text exactly "
         "(whitespace and indentation included, line-number prefixes excluded)."),
    _row("ambiguous", 422, 7, "old_string occurs more than once: add surrounding lines so that it is unique, or "
         "set replace_all to true to change every occurrence."),
    _row("no_change", 422, 7, "old_string equals new_string, or the edit would leave the file as it is: nothing "
         "was written; check new_string."),
    _row("placeholder", 422, 7, "new_string (or content) puts an omission marker such as `// ... rest of code "
         "...` where the file has code, which would delete that code: write the full text you mean to keep "
         "instead."),
    _row("is_directory", 422, 3, "the path is a folder: give the path of a file."),
    _row("binary_file", 422, 3, "the file is binary: these tools handle text files only."),
    _row("special_file", 422, 3, "the path is a device, FIFO or socket: these tools handle regular files only."),
    _row("unsupported_encoding", 422, 3, "the file is not UTF-8 or UTF-16 with a BOM: it cannot be edited here."),
    _row("invalid_argument", 422, 2, "the arguments are malformed: fix them as the message says."),
    _row("file_not_found", 404, 3, "there is no such file: check the path (the message may suggest one); "
         "create new files with write_file."),
    _row("too_large", 413, 3, "the file (or the result) is over the size limit: read it in parts with offset "
         "and limit; make smaller changes."),
    _row("outside_root", 403, 3, "the path (or a symlink on it) leads outside the repository root, or into the "
         "coordinator's state folder: use a path inside the repository."),
    _row("permission_denied", 403, 3, "the operating system (or the service's token) refused access: this "
         "file cannot be changed from here."),
    _row("lock_timeout", 423, 4, "another agent held this file's lock too long: nothing was written; retry the "
         "same call in a moment.", retry_after_s=1),
    _row("leased", 423, 4, "another session holds an exclusive lease on this path (the message says who, and "
         "until when): nothing was written; work on something else and come back after the lease ends."),
    _row("state_unavailable", 503, 5, "the coordination service (Redis) could not be reached: nothing was "
         "written; wait a moment, then read the file again and retry.", retry_after_s=1),
    _row("check_failed", 422, 7, "the commit's check command failed on the commit's tree (the message ends with "
         "its output): nothing was committed and the branch, the index and the working tree did not change; fix "
         "the cause and commit again."),
    _row("io_error", 500, 6, "an unexpected failure: read the file again before you retry, to see what it "
         "holds now."),
)  # fmt: skip

_SERVICE_ROWS = (
    # Raised by clients only (`HttpClient`, and the adapters over it), under the library code
    # `invalid_argument` (the client's configuration needs changing; the library's codes are `ErrorCode`'s):
    # the service never answers with it. Its status is what a gateway (an MCP server forwarding to the
    # service) would answer: 502.
    CodeInfo("tls_untrusted", 502, "the coordinator service's TLS certificate is not trusted here (not signed "
             "by a known CA, or not for this host name): nothing was sent; retrying will not help. The service "
             "needs its CA file (ca_file=, --ca-file or $EDIT_COORDINATOR_CA_FILE) and a URL naming a host its "
             "certificate covers.", exit_status=5, library=ErrorCode.INVALID_ARGUMENT),
    CodeInfo("unauthorized", 401, "the bearer token is missing, malformed, expired or not signed by this "
             "coordinator: get a new token; nothing was done.", exit_status=8, library=ErrorCode.PERMISSION_DENIED),
    CodeInfo("forbidden", 403, "this token may not do that (a session token acts only as its own session; "
             "admin routes need the admin token): nothing was done.", exit_status=8,
             library=ErrorCode.PERMISSION_DENIED),
    CodeInfo("not_found", 404, "there is no such endpoint: see /openapi.json.", exit_status=2,
             library=ErrorCode.INVALID_ARGUMENT),
    CodeInfo("method_not_allowed", 405, "the endpoint does not take that method: see the Allow header.",
             exit_status=2, library=ErrorCode.INVALID_ARGUMENT),
    CodeInfo("request_in_progress", 409, "a request with this Idempotency-Key is still running: repeat the same "
             "call with the same key in a moment to get its answer.", True, 1, 5, ErrorCode.STATE_UNAVAILABLE),
    CodeInfo("idempotency_key_reused", 422, "this Idempotency-Key was used for a different request: use a new "
             "key for each distinct call.", exit_status=2, library=ErrorCode.INVALID_ARGUMENT),
    CodeInfo("overloaded", 429, "the service is at its limit of calls in progress: nothing was done; retry in "
             "a moment.", True, 1, 5, ErrorCode.STATE_UNAVAILABLE),
    CodeInfo("shutting_down", 503, "the service is stopping and takes no new writes: nothing was done; retry "
             "against the restarted service.", True, 5, 5, ErrorCode.STATE_UNAVAILABLE),
    CodeInfo("internal_error", 500, "the service failed while handling the call (see its log): read the file "
             "again to see whether the change was applied before you retry.", exit_status=6,
             library=ErrorCode.IO_ERROR),
)  # fmt: skip

CODES: dict[str, CodeInfo] = {row.code: row for row in (*_LIBRARY_ROWS, *_SERVICE_ROWS)}
SERVICE_CODES: frozenset[str] = frozenset(row.code for row in _SERVICE_ROWS)
# A code unknown to this version (a newer peer): a refusal, never a server error.
UNKNOWN = CodeInfo("unknown", 400, "the call was refused: read the message.", library=ErrorCode.INVALID_ARGUMENT)


def info(code: str | ErrorCode) -> CodeInfo:
    """The row of `code` (an unknown code gets the `UNKNOWN` row)."""
    return CODES.get(str(code.value if isinstance(code, ErrorCode) else code), UNKNOWN)


def library_code(code: str) -> ErrorCode:
    """The library code a client raises for `code` (a library code itself, or a service code's nearest)."""
    return info(code).library or ErrorCode.INVALID_ARGUMENT


def bare_refusal(exc: CoordinatorError) -> CoordinatorError:
    """The refusal without its traceback and the internal exception it was raised while handling.

    A refusal is an answer, not a bug: its code, message and details say everything. Its traceback and
    context, though, hold the frames it passed through, and those frames hold the refusal (a frame that
    raises an exception it keeps in a local, a cached-view refusal confirmed in Redis, a future whose
    exception's traceback holds the frame that set it): reference cycles that only the cyclic garbage
    collector frees. At tens of objects per refused call they drove full collections, which stop every
    thread of the host, an event loop included (issue 16's loop-stall figure). Used where a refusal leaves
    the engine and where AsyncClient keeps one for its caller. An `io_error` keeps its `__cause__` (the
    OSError), which is what its reader needs.
    """
    exc.__traceback__ = None
    exc.__context__ = None
    return exc


def guidance(code: str | ErrorCode) -> str:
    return info(code).guidance


assert set(ErrorCode._value2member_map_) <= set(CODES), "every ErrorCode has its row in CODES"
