"""The MCP tools beyond Read / Write / Edit: leases, history, undo and redo (see file_tools.py for the file
tools).

Not a tool: `restore` (a whole file back as it was at a version, discarding every later version, whoever
wrote it). It is for people (`edit-coordinator restore`, the admin HTTP route), because an agent that
reaches for it throws away other agents' acknowledged work; an agent reverts its own change with undo.

Each tool is one row of `COORDINATION_TOOLS`: its spec (name, description, input schema) and a handler from
the session (a `coordinator.client.BoundSession`, local or remote) and the arguments to what the model sees.
Adding a tool for a new `Client` operation is one row here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.leases import DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S
from coordinator.tools.file_tools import (
    ToolOutcome,
    ToolSpec,
    check_keys,
    error_section,
    opt_whole,
    req_str,
    write_outcome,
)

_SCHEMA = "http://json-schema.org/draft-07/schema#"
_STATE_ERRORS = ("state_unavailable", "invalid_argument")


def _schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "$schema": _SCHEMA,
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_TTL = {
    "type": "number",
    "minimum": MIN_TTL_S,
    "maximum": MAX_TTL_S,
    "description": f"Seconds (default {DEFAULT_TTL_S:.0f}).",
}
_LEASE_ID = {"type": "string", "description": "A lease id from the lease tool (omitted: all your leases)."}

LEASE_SCHEMA = _schema(
    {
        "paths": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string"},
            "description": "Paths or globs inside the repository: 'src/app.py', 'src/**/*.py', 'docs/'.",
        },
        "mode": {
            "type": "string",
            "enum": ["exclusive", "shared"],
            "default": "exclusive",
            "description": "exclusive: others cannot write the paths; shared: others cannot lease them exclusively.",
        },
        "ttl_s": _TTL,
    },
    ("paths",),
)
RENEW_SCHEMA = _schema({"lease_id": _LEASE_ID, "ttl_s": _TTL})
RELEASE_SCHEMA = _schema(
    {"lease_id": _LEASE_ID, "pattern": {"type": "string", "description": "End only the leases on this pattern."}}
)
LEASES_SCHEMA = _schema({})
HISTORY_SCHEMA = _schema(
    {
        "file_path": {"type": "string", "description": "The file whose recorded writes to list"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Newest entries (default 20)."},
    },
    ("file_path",),
)
UNDO_SCHEMA = _schema(
    {
        "file_path": {"type": "string", "description": "The file whose write to revert"},
        "version": {
            "type": "integer",
            "minimum": 1,
            "description": "Revert this version's change (see history). Omitted: your latest write of the file "
            "that is still in effect.",
        },
    },
    ("file_path",),
)
REDO_SCHEMA = _schema(
    {"file_path": {"type": "string", "description": "The file whose last undo to take back"}}, ("file_path",)
)

COMMIT_SCHEMA = _schema(
    {
        "message": {"type": "string", "description": "The commit message; a trailer naming your session is added"},
        "include_others": {
            "type": "boolean",
            "description": "Commit another session's uncommitted change too where yours cannot be separated from it",
        },
    },
    ("message",),
)
_COMMIT_DESCRIPTION = "\n".join(
    [
        "Makes a git commit on the current branch of exactly your own uncommitted writes, applied to HEAD's "
        "version of each file. The working tree, other agents' uncommitted changes and anything staged stay as "
        "they are. Use it instead of `git add` / `git commit -a`, which would sweep up other agents' work.",
        "",
        "- Where your change edits lines another agent wrote and has not committed, it is refused with stale, "
        "naming that agent; commit theirs first, or pass include_others.",
        "- With nothing of yours to commit it is refused with no_change; writes someone already committed by "
        "hand are recognised and marked, not committed twice.",
        "",
        error_section(("stale", "no_change", "invalid_argument", *_STATE_ERRORS)),
    ]
)

_LEASE_DESCRIPTION = "\n".join(
    [
        "Reserves files or globs for a while, so that no other agent writes them meanwhile (all or none).",
        "",
        "- Other agents can still read leased files; their writes, edits and undos are refused with `leased`.",
        "- A lease ends after ttl_s seconds unless renewed; release it when you are done.",
        "- If another agent holds a conflicting lease, nothing is granted and the error says who and until when.",
        "",
        error_section(("leased", "invalid_argument", "state_unavailable")),
    ]
)
_HISTORY_DESCRIPTION = (
    "Lists the recorded writes of a file, newest first: version, time, session, operation and the lines it "
    "changed. Use it to find the version to give undo."
)
_UNDO_DESCRIPTION = "\n".join(
    [
        "Reverts one recorded write: takes that write's change back out of the file and keeps everything "
        "written since, by you or by other agents (an edit like any other, recorded, and taken back by redo).",
        "",
        "- Without version it reverts your own latest write of the file that is still in effect; call it "
        "again to step further back, one write at a time.",
        "- You must have read the file, and it must not have changed since (not_read / stale otherwise).",
        "- It never discards another agent's work: when a later write changed the same lines, the undo is "
        "refused with stale, naming those lines and who wrote them, and nothing is written.",
        "",
        error_section(("not_read", "stale", "leased", "lock_timeout", "file_not_found", "no_change", *_STATE_ERRORS)),
    ]
)
_REDO_DESCRIPTION = "\n".join(
    [
        "Takes back your latest undo of a file: brings the reverted change back, keeping everything written "
        "since (an undo of that undo). Call it again to step forward through earlier undos.",
        "",
        "- The same rules as undo: read the file first; a later write on the same lines makes it stale.",
        "",
        error_section(("not_read", "stale", "leased", "lock_timeout", "file_not_found", "no_change", *_STATE_ERRORS)),
    ]
)


def _describe(leases: list[Any]) -> str:
    if not leases:
        return "No lease."
    now = time.time()
    return "\n".join(f"- {x.id}: {x.describe(now)} (token {x.token})" for x in leases)


def _lease(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, LEASE_SCHEMA)
    paths = args.get("paths")
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "paths must be a non-empty array of strings.")
    granted = s.lease(paths, mode=args.get("mode", "exclusive"), ttl_s=_ttl(args))
    return ToolOutcome("Granted:\n" + _describe(granted), {"leases": [x.to_dict() for x in granted]})


def _renew(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, RENEW_SCHEMA)
    renewed = s.renew(_opt_str(args, "lease_id"), ttl_s=_ttl(args))
    return ToolOutcome("Renewed:\n" + _describe(renewed), {"leases": [x.to_dict() for x in renewed]})


def _release(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, RELEASE_SCHEMA)
    n = s.release(_opt_str(args, "lease_id"), _opt_str(args, "pattern"))
    return ToolOutcome(f"Released {n} lease{'s' if n != 1 else ''}.", {"released": n})


def _leases(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, LEASES_SCHEMA)
    found = s.all_leases()
    return ToolOutcome("Live leases:\n" + _describe(found), {"leases": [x.to_dict() for x in found]})


def _history(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, HISTORY_SCHEMA)
    path = req_str(args, "file_path")
    entries = s.history(path, opt_whole(args, "limit", 1) or 20)
    if not entries:
        return ToolOutcome(f"No recorded writes of {path}.", {"entries": []})
    lines = [
        f"v{e.version}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e.time))}  {e.session}  "
        f"{e.operation}  lines {e.first_line}-{e.last_line}"
        for e in entries
    ]
    return ToolOutcome("\n".join(lines), {"entries": [e.to_dict() for e in entries]})


def _undo(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, UNDO_SCHEMA)
    return write_outcome(s.undo(req_str(args, "file_path"), opt_whole(args, "version", 1)))


def _redo(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, REDO_SCHEMA)
    return write_outcome(s.redo(req_str(args, "file_path")))


def _commit(s: Any, args: dict[str, Any]) -> ToolOutcome:
    check_keys(args, COMMIT_SCHEMA)
    include = args.get("include_others", False)
    if not isinstance(include, bool):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "include_others must be true or false.")
    result = s.commit(req_str(args, "message"), include)
    if result.commit is None:
        text = "Nothing new to commit: your writes are already in HEAD."
    else:
        text = f"Committed {result.commit[:12]} on {result.branch}: " + ", ".join(result.paths)
    return ToolOutcome(text, result.to_dict())


def _ttl(args: dict[str, Any]) -> float:
    v = args.get("ttl_s", DEFAULT_TTL_S)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"ttl_s must be a number of seconds, not {v!r}.")
    return float(v)


def _opt_str(args: dict[str, Any], name: str) -> str | None:
    v = args.get(name)
    if v is not None and not isinstance(v, str):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a string.")
    return v


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    handler: Callable[[Any, dict[str, Any]], ToolOutcome]


COORDINATION_TOOLS: tuple[Tool, ...] = (
    Tool(ToolSpec("lease", "Lease paths", _LEASE_DESCRIPTION, LEASE_SCHEMA, False), _lease),
    Tool(ToolSpec("renew", "Renew leases", "Extends your leases (one by lease_id, or all) to end ttl_s from now.",
                  RENEW_SCHEMA, False), _renew),
    Tool(ToolSpec("release", "Release leases", "Ends your leases: one by lease_id, those on a pattern, or all.",
                  RELEASE_SCHEMA, False), _release),
    Tool(ToolSpec("leases", "List leases", "Lists every live lease: who holds which paths, until when.",
                  LEASES_SCHEMA, True), _leases),
    Tool(ToolSpec("history", "File history", _HISTORY_DESCRIPTION, HISTORY_SCHEMA, True), _history),
    Tool(ToolSpec("undo", "Undo a write", _UNDO_DESCRIPTION, UNDO_SCHEMA, False), _undo),
    Tool(ToolSpec("redo", "Redo an undo", _REDO_DESCRIPTION, REDO_SCHEMA, False), _redo),
    Tool(ToolSpec("commit", "Commit your work", _COMMIT_DESCRIPTION, COMMIT_SCHEMA, False), _commit),
)  # fmt: skip
