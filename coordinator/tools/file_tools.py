"""The MCP tools as plain functions from arguments to text, raising CoordinatorError (testable without MCP).

The file tools carry the names, input schemas and rules of Claude Code's Read / Write / Edit / MultiEdit:
`read_file`, `write_file`, `edit_file`, `multi_edit`; leases, history, undo and redo are in
mcp_coordination.py.
What each error code means to the model comes from `coordinator.errors.CODES`.

* The "unchanged since your last read" short answer is given only for a view that this process has already
  returned in full. A session id fixed in a config file outlives a conversation; a new conversation with the
  same id has seen nothing, so it gets the full text the first time.
* Notices ("files you read have changed since") are appended to the text of every result that carries one.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator import errors
from coordinator.engine import ReadResult, Session, WriteResult
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text import semantics

# ---------------------------------------------------------------------------------------------------------
# What each error code means to the model, and what to do about it
# ---------------------------------------------------------------------------------------------------------
ERROR_GUIDE: dict[str, str] = {c.value: errors.guidance(c) for c in ErrorCode}

_PATH_ERRORS = (
    "file_not_found",
    "is_directory",
    "binary_file",
    "special_file",
    "too_large",
    "unsupported_encoding",
    "outside_root",
    "permission_denied",
)
_SERVICE_ERRORS = ("state_unavailable", "invalid_argument", "io_error")
_VIEW_ERRORS = ("not_read", "stale", "leased", "lock_timeout")
_EDIT_ERRORS = ("no_match", "ambiguous", "no_change", "file_exists", "placeholder")
_KNOWN_CODES = frozenset(c.value for c in ErrorCode)


def error_section(codes: tuple[str, ...]) -> str:
    """The error guide for one tool: only codes this version of the engine has."""
    lines = [
        "Errors come back as tool errors whose text starts with the error code in brackets, e.g. "
        '"[stale] ...". Nothing is written when an error is returned. The codes:'
    ]
    lines += [f"- {c}: {ERROR_GUIDE[c]}" for c in codes if c in _KNOWN_CODES]
    return "\n".join(lines)


_SHARED = (
    "Other agents edit this repository at the same time, through the same coordinator: a change of theirs "
    "between your read and your edit makes your edit fail with `stale` rather than overwrite their work."
)
_PATHS = (
    "file_path is an absolute path inside the repository root, or a path relative to that root; it must not "
    "lead outside the root."
)


def _read_description(default_lines: int) -> str:
    return "\n".join(
        [
            "Reads a text file of the repository and returns its lines numbered.",
            "",
            "Usage:",
            f"- {_PATHS}",
            f"- By default it returns up to {default_lines} lines from the start of the file. offset (the "
            "1-based line number to start at) and limit (how many lines) read part of a long file; prefer "
            "reading the whole file when it fits.",
            "- Lines are numbered like `cat -n`: spaces, the line number, a tab, then the line exactly as in "
            "the file. The number and the tab are not part of the file: never put them in old_string or "
            f"new_string. Lines longer than {semantics.MAX_LINE_CHARS} characters are cut in this view.",
            "- Reading records what you saw. edit_file, multi_edit and write_file (on an existing file) only "
            "work on a file that you have read and that has not changed since your last read or write of it.",
            "- Reading the same part of a file again when it has not changed returns a short "
            '"unchanged since your last read" answer instead of the lines: what you read before is current.',
            f"- {_SHARED}",
            "",
            error_section((*_PATH_ERRORS, *_SERVICE_ERRORS)),
        ]
    )


_WRITE_DESCRIPTION = "\n".join(
    [
        "Writes a file of the repository: creates it, or replaces all of its content.",
        "",
        "Usage:",
        f"- {_PATHS}",
        "- To overwrite an existing file you must have read it first with read_file, and it must not have "
        "changed since; otherwise the write is refused (not_read or stale). New files need no read; missing "
        "folders are created.",
        "- content is written exactly as given (line ends included). The file keeps its encoding "
        "(UTF-8, UTF-8 with BOM, UTF-16).",
        "- Prefer edit_file or multi_edit for changes to an existing file: they send only the changed text "
        "and cannot drop another agent's changes elsewhere in the file.",
        f"- {_SHARED}",
        "",
        error_section((*_VIEW_ERRORS, "placeholder", *_PATH_ERRORS, *_SERVICE_ERRORS)),
    ]
)

_MATCHED_TEXT = (
    "match the file's text exactly: whitespace and indentation as they appear after the line-number prefix "
    "of read_file, without the prefix. Typographic (curly) quotes and straight quotes are treated as the "
    "same, and new_string then takes the file's quote style."
)
_EXACT_RULE = f"- old_string must {_MATCHED_TEXT}"
_FLEXIBLE_RULE = (
    f"- old_string should {_MATCHED_TEXT} If there is no exact match, whole lines are matched ignoring "
    "trailing whitespace, then with the indentation shifted by a constant (new_string is re-indented by the "
    "same shift); such a match must be unique too, and the answer says which match was used and at which "
    "lines: check the snippet. Nothing looser (no similarity) is tried."
)
_EDIT_RULES = [
    "- You must read the file with read_file before editing it, and it must not have changed since your last "
    "read or write of it (not_read / stale otherwise).",
    _EXACT_RULE,
    "- old_string must occur exactly once, unless replace_all is true (then every occurrence is replaced). "
    "Include enough surrounding context to make it unique.",
    "- new_string must differ from old_string. An empty new_string deletes the text (a whole deleted line "
    "takes its line end with it).",
    "- An empty old_string creates a missing file (or fills an empty one) with new_string; it is refused on a "
    "file that has content.",
    "- The file keeps its line ends (CRLF stays CRLF) and encoding. The answer shows numbered lines around the change.",
]

_EDIT_DESCRIPTION = "\n".join(
    [
        "Performs an exact string replacement in a file of the repository.",
        "",
        "Usage:",
        f"- {_PATHS}",
        *_EDIT_RULES,
        "- Use replace_all to rename a variable or change every copy of a string across the file.",
        f"- {_SHARED}",
        "",
        error_section((*_VIEW_ERRORS, *_EDIT_ERRORS, *_PATH_ERRORS, *_SERVICE_ERRORS)),
    ]
)

_MULTI_EDIT_DESCRIPTION = "\n".join(
    [
        "Makes several exact string replacements in one file of the repository, all or nothing.",
        "",
        "Usage:",
        f"- {_PATHS}",
        "- The edits apply in order, each to the result of the previous ones, in one step: either all "
        "succeed and the file is written once, or none is applied and the error names the failing edit.",
        "- Each edit follows the rules of edit_file:",
        *(f"  {rule}" for rule in _EDIT_RULES),
        "- Plan the edits so that an earlier one does not change the text a later one looks for.",
        f"- {_SHARED}",
        "",
        error_section((*_VIEW_ERRORS, *_EDIT_ERRORS, *_PATH_ERRORS, *_SERVICE_ERRORS)),
    ]
)

INSTRUCTIONS = (
    "File tools for a repository that several agents edit at once. Read a file with read_file before you "
    "change it with edit_file, multi_edit or write_file; if a change fails with `stale`, another agent or "
    "program changed the file: read it again and redo your change on what is there now."
)

# ---------------------------------------------------------------------------------------------------------
# Input schemas (Claude Code's Read / Write / Edit / MultiEdit)
# ---------------------------------------------------------------------------------------------------------
_SCHEMA = "http://json-schema.org/draft-07/schema#"

READ_SCHEMA: dict[str, Any] = {
    "$schema": _SCHEMA,
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to read"},
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "The line number to start reading from. Only provide if the file is too large to "
            "read at once",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "description": "The number of lines to read. Only provide if the file is too large to read at once.",
        },
    },
    "required": ["file_path"],
    "additionalProperties": False,
}

WRITE_SCHEMA: dict[str, Any] = {
    "$schema": _SCHEMA,
    "type": "object",
    "properties": {
        "file_path": {
            "type": "string",
            "description": "The absolute path to the file to write",
        },
        "content": {"type": "string", "description": "The content to write to the file"},
    },
    "required": ["file_path", "content"],
    "additionalProperties": False,
}

EDIT_SCHEMA: dict[str, Any] = {
    "$schema": _SCHEMA,
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to modify"},
        "old_string": {"type": "string", "description": "The text to replace"},
        "new_string": {
            "type": "string",
            "description": "The text to replace it with (must be different from old_string)",
        },
        "replace_all": {
            "type": "boolean",
            "default": False,
            "description": "Replace all occurrences of old_string (default false)",
        },
    },
    "required": ["file_path", "old_string", "new_string"],
    "additionalProperties": False,
}

MULTI_EDIT_SCHEMA: dict[str, Any] = {
    "$schema": _SCHEMA,
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to modify"},
        "edits": {
            "type": "array",
            "minItems": 1,
            "description": "Array of edit operations to perform sequentially on the file",
            "items": {
                "type": "object",
                "properties": {
                    "old_string": {"type": "string", "description": "The text to replace"},
                    "new_string": {"type": "string", "description": "The text to replace it with"},
                    "replace_all": {
                        "type": "boolean",
                        "default": False,
                        "description": "Replace all occurrences of old_string (default false).",
                    },
                },
                "required": ["old_string", "new_string"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["file_path", "edits"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    schema: dict[str, Any]
    read_only: bool


def tool_specs(default_read_lines: int = 2000, match: str = "exact") -> list[ToolSpec]:
    """The tools, in the order they are listed: the four file tools, then leases, history, undo and redo.
    `match`: the matching rule of the sessions they serve ("flexible" says so in the edit tools' rules; the
    schemas are the same either way)."""
    from coordinator.tools.coordination_tools import COORDINATION_TOOLS

    edit, multi = _EDIT_DESCRIPTION, _MULTI_EDIT_DESCRIPTION
    if match == "flexible":
        edit, multi = edit.replace(_EXACT_RULE, _FLEXIBLE_RULE), multi.replace(_EXACT_RULE, _FLEXIBLE_RULE)
    return [
        ToolSpec("read_file", "Read file", _read_description(default_read_lines), READ_SCHEMA, True),
        ToolSpec("write_file", "Write file", _WRITE_DESCRIPTION, WRITE_SCHEMA, False),
        ToolSpec("edit_file", "Edit file", edit, EDIT_SCHEMA, False),
        ToolSpec("multi_edit", "Edit file (several edits)", multi, MULTI_EDIT_SCHEMA, False),
        *(tool.spec for tool in COORDINATION_TOOLS),
    ]


def session_match(session: Any) -> str:
    """The matching rule the edits of `session` (a BoundSession) are made with: its client's, else (an
    in-process client that leaves it to the engine) its coordinator's."""
    from coordinator.client import LocalClient

    client = getattr(session, "client", None)
    found: str | None = None
    if isinstance(client, LocalClient):
        found = client.matching
    else:  # HttpClient's own (not imported here: that would load httpx for every local MCP server)
        found = getattr(client, "match", None)
    return "flexible" if found == "flexible" else "exact"


def extra_handlers(session: Any) -> dict[str, Callable[[dict[str, Any]], ToolOutcome]]:
    """The handlers of the coordination tools (leases, history, undo, redo), bound to `session`."""
    from coordinator.tools.coordination_tools import COORDINATION_TOOLS

    return {tool.spec.name: functools.partial(tool.handler, session) for tool in COORDINATION_TOOLS}


# ---------------------------------------------------------------------------------------------------------
# The tools: plain functions from arguments to text, raising CoordinatorError (testable without MCP)
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolOutcome:
    """What a successful call returns: the text for the model, and a small structured summary."""

    text: str
    data: dict[str, Any] | None = None


_MAX_SHOWN = 100_000


@dataclass
class SessionTools:
    """The four tools for one session.

    `shown` remembers which views (path, offset, limit, hash) this process has returned in full, so that
    the engine's "unchanged since your last read" answer is passed on only for a view this conversation has
    actually seen.
    """

    session: Any  # a BoundSession (coordinator.client), or an engine Session (wrapped on creation)
    shown: set[tuple[str, int, int, str]] = field(default_factory=set)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if isinstance(self.session, Session):
            from coordinator.client import LocalClient

            engine_session = self.session
            client = LocalClient(engine_session.coord, policy=engine_session.policy, match=engine_session.match)
            self.session = client.session(engine_session.id)

    def call(self, name: str, arguments: dict[str, Any] | None) -> ToolOutcome:
        handler = self._handlers().get(name)
        if handler is None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"Unknown tool {name!r}; the tools are {', '.join(self._handlers())}.",
            )
        args = arguments or {}
        if not isinstance(args, dict):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The arguments must be a JSON object.")
        return handler(args)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], ToolOutcome]]:
        return {
            "read_file": self.read_file,
            "write_file": self.write_file,
            "edit_file": self.edit_file,
            "multi_edit": self.multi_edit,
            **extra_handlers(self.session),
        }

    def read_file(self, args: dict[str, Any]) -> ToolOutcome:
        check_keys(args, READ_SCHEMA)
        path = req_str(args, "file_path")
        offset = opt_whole(args, "offset", 0)
        limit = opt_whole(args, "limit", 1)
        r = self.session.read(path, offset=offset, limit=limit)
        view = (r.path, offset or 0, limit or 0, r.hash)
        with self._mutex:
            seen = view in self.shown
            if len(self.shown) >= _MAX_SHOWN:
                self.shown.clear()  # forgetting only costs a full answer where a short one would do
            self.shown.add(view)
        text = _render_read(r, full=not (r.unchanged and seen))
        if r.notice and r.notice not in text:
            text += f"\n\nNote: {r.notice}"
        return ToolOutcome(text)

    def write_file(self, args: dict[str, Any]) -> ToolOutcome:
        check_keys(args, WRITE_SCHEMA)
        path = req_str(args, "file_path")
        content = req_str(args, "content", allow_empty=True)
        return write_outcome(self.session.write(path, content))

    def edit_file(self, args: dict[str, Any]) -> ToolOutcome:
        check_keys(args, EDIT_SCHEMA)
        path = req_str(args, "file_path")
        old = req_str(args, "old_string", allow_empty=True)
        new = req_str(args, "new_string", allow_empty=True)
        replace_all = _opt_bool(args, "replace_all")
        return write_outcome(self.session.edit(path, old, new, replace_all=replace_all))

    def multi_edit(self, args: dict[str, Any]) -> ToolOutcome:
        check_keys(args, MULTI_EDIT_SCHEMA)
        path = req_str(args, "file_path")
        edits = args.get("edits")
        if isinstance(edits, str):
            # Some clients send a nested array as its JSON text; accept it when it parses to an array.
            try:
                edits = json.loads(edits)
            except ValueError:
                pass
        if not isinstance(edits, list) or not edits:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                "edits must be a non-empty array of {old_string, new_string, replace_all?} objects.",
            )
        item_keys = set(MULTI_EDIT_SCHEMA["properties"]["edits"]["items"]["properties"])
        for i, e in enumerate(edits):
            if isinstance(e, dict):
                extra = sorted(set(e) - item_keys)
                if extra:
                    raise CoordinatorError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"edits[{i}] has unknown properties {extra}; each edit takes old_string, new_string "
                        "and optionally replace_all.",
                    )
        return write_outcome(self.session.multi_edit(path, edits))


def _render_read(r: ReadResult, full: bool) -> str:
    if not full or not r.unchanged:
        if r.message and r.message not in ("unchanged", "empty", "offset_past_end"):
            return f"{r.text}\n\n({r.message})"
        return r.text
    # The engine answered "unchanged" for a view this process never returned: give the lines.
    text, message = r.lines_text()
    if message and message not in ("empty", "offset_past_end"):
        return f"{text}\n\n({message})"
    return text


def write_outcome(w: WriteResult) -> ToolOutcome:
    text = w.message
    if w.snippet:
        text += "\n" + w.snippet
    data: dict[str, Any] = {
        "path": w.path,
        "operation": w.operation,
        "version": w.version,
        "created": w.created,
        "replacements": w.replacements,
        "start_line": w.start_line,
        "match": w.match,  # how old_string was found (exact, quotes, trailing_whitespace, indentation)
    }
    if w.match_lines is not None:
        data["match_lines"] = list(w.match_lines)
    if w.reverts is not None:
        data["reverts"] = w.reverts  # undo / redo: the version whose change was reverted
    return ToolOutcome(text, data)


def check_keys(args: dict[str, Any], schema: dict[str, Any]) -> None:
    extra = sorted(set(args) - set(schema["properties"]))
    if extra:
        allowed = ", ".join(schema["properties"])
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Unknown argument(s) {extra}; this tool takes: {allowed}.")


def req_str(args: dict[str, Any], name: str, allow_empty: bool = False) -> str:
    if name not in args:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} is required.")
    v = args[name]
    if not isinstance(v, str):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a string, not {_json_type(v)}.")
    if not allow_empty and not v:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must not be empty.")
    return v


def opt_whole(args: dict[str, Any], name: str, minimum: int) -> int | None:
    """An optional whole number; JSON numbers like 10.0 are accepted as 10 (some clients send floats)."""
    v = args.get(name)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a whole number, not {v!r}.")
    if v < minimum:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be at least {minimum}; got {v}.")
    return v


def _opt_bool(args: dict[str, Any], name: str) -> bool:
    v = args.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be true or false, not {v!r}.")
    return v


def _json_type(v: object) -> str:
    return {dict: "an object", list: "an array", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(v), "null" if v is None else type(v).__name__
    )


def error_payload(exc: BaseException) -> tuple[str, str]:
    """(code, message) for any exception raised by a tool; unexpected ones become io_error."""
    if isinstance(exc, CoordinatorError):
        return exc.code.value, exc.message
    return (
        ErrorCode.IO_ERROR.value,
        f"The coordinator failed unexpectedly ({type(exc).__name__}: {exc}). The file may or may not have "
        "changed: read it again before your next change.",
    )
