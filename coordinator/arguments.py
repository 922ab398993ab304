"""Argument rules, checked once. The engine checks every argument of the public API with these; adapters
(HTTP, MCP, command line) call the same functions, or use the same patterns in their schemas, instead of
keeping copies, so a rule and its message are the same from every way in.

Each check returns the value it accepts (normalised where said) or raises CoordinatorError with code
`invalid_argument` (`too_large` for text over the size limit, `no_change` for an edit that changes
nothing), with a message meant for the model: what is wrong and what to give instead.

    from coordinator import arguments
    arguments.check_session_id(sid); arguments.check_path(p); arguments.opt_int(offset, "offset", minimum=0)
    specs = arguments.check_edits(edits, limit)     # -> list[semantics.EditSpec]
    SESSION_PATTERN                                 # the same rule as a regex, for JSON schemas

Numbers: the Python API is strict (a float is a type error there). `opt_int(..., lenient=True)` accepts a
float with no fractional part, for callers whose input is JSON; today the MCP tools normalise such numbers
themselves (tools/file_tools.py) and the service's schemas take whole numbers only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from coordinator.disk.fsio import validate_path_argument
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.semantics import EditSpec

__all__ = [
    "DURABILITIES",
    "POLICIES",
    "SESSION_PATTERN",
    "STATE_CHECKS",
    "check_bool",
    "check_call_id",
    "check_choice",
    "check_durability",
    "check_edit_pair",
    "check_edits",
    "check_match",
    "check_path",
    "check_policy",
    "check_session_id",
    "check_state_check",
    "check_text",
    "is_call_id",
    "is_session_id",
    "opt_int",
]

POLICIES: tuple[str, ...] = ("strict", "rebase")
DURABILITIES: tuple[str, ...] = ("fsync", "none")
STATE_CHECKS: tuple[str, ...] = ("cached", "always")
SESSION_PATTERN = r"^[A-Za-z0-9._:@+/=-]{1,200}$"
_SESSION_RE = re.compile(SESSION_PATTERN)

check_path = validate_path_argument
"""A path argument: text, not empty, no NUL byte or backslash, bounded length (fsio owns the rule)."""


def is_session_id(value: object) -> bool:
    return isinstance(value, str) and _SESSION_RE.fullmatch(value) is not None  # match's $ takes a final \n


def is_call_id(value: object) -> bool:
    """A tool-call id from an agent's hook event: the session ids' rule (1-200 of letters, digits and
    . _ : @ + / = -), so that no id can carry a newline into a commit's trailers, the history or Redis."""
    return is_session_id(value)


def check_call_id(call_id: object) -> str:
    if not is_call_id(call_id):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "A tool-call id is 1-200 characters from letters, digits and . _ : @ + / = - (the hook event's "
            f"tool_use_id was {str(call_id)[:60]!r}).",
        )
    assert isinstance(call_id, str)
    return call_id


def check_session_id(session_id: object) -> str:
    if not is_session_id(session_id):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "A session id is 1-200 characters from letters, digits and . _ : @ + / = -",
        )
    assert isinstance(session_id, str)
    return session_id


def check_choice(value: object, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Unknown {name} {value!r}; use one of {options}.")
    return value


def check_policy(policy: object) -> str:
    if policy not in POLICIES:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"Unknown policy {policy!r}; use 'strict' (the default) or 'rebase'."
        )
    assert isinstance(policy, str)
    return policy


MATCHES: tuple[str, ...] = ("exact", "flexible")


def check_match(match: object) -> str:
    if match not in MATCHES:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"Unknown match {match!r}; use 'exact' (the default) or 'flexible' (also whole lines with trailing "
            "whitespace ignored, then with the indentation shifted).",
        )
    assert isinstance(match, str)
    return match


def check_durability(durability: object) -> str:
    if durability not in DURABILITIES:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "durability must be 'fsync' or 'none'.")
    assert isinstance(durability, str)
    return durability


def check_state_check(state_check: object) -> str:
    if state_check not in STATE_CHECKS:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "state_check must be 'cached' or 'always'.")
    assert isinstance(state_check, str)
    return state_check


def opt_int(v: object, name: str, minimum: int, *, lenient: bool = False) -> int | None:
    """An optional whole number of at least `minimum` (offset, limit, version); None stays None."""
    if v is None:
        return None
    if lenient and isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a whole number or omitted.")
    if v < minimum:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be at least {minimum}; got {v}.")
    return v


def check_text(v: object, name: str, limit: int) -> str:
    """A text field (content, old_string, new_string): a string, at most `limit` characters, no NUL."""
    if not isinstance(v, str):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a string.")
    if len(v) > limit:
        raise CoordinatorError(ErrorCode.TOO_LARGE, f"{name} is longer than the limit of {limit} characters.")
    if "\x00" in v:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} contains a NUL byte; text files cannot hold one.")
    return v


def check_bool(v: object, name: str) -> bool:
    if not isinstance(v, bool):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be true or false.")
    return v


def check_edit_pair(old_string: object, new_string: object, replace_all: object, limit: int) -> EditSpec:
    """One edit's arguments; `no_change` when old_string equals new_string."""
    old = check_text(old_string, "old_string", limit)
    new = check_text(new_string, "new_string", limit)
    ra = check_bool(replace_all, "replace_all")
    if old == new:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            "old_string and new_string are the same, so there is nothing to change. Give the new text in new_string.",
        )
    return EditSpec(old, new, ra)


def check_edits(edits: object, limit: int) -> list[EditSpec]:
    """The edits of a multi_edit: a non-empty list of EditSpec or {old_string, new_string, replace_all?}."""
    if not isinstance(edits, Sequence) or isinstance(edits, str | bytes) or not edits:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "edits must be a non-empty list of edits.")
    return [_one_edit(i, e, limit) for i, e in enumerate(edits)]


def _one_edit(i: int, e: Any, limit: int) -> EditSpec:
    if isinstance(e, EditSpec):
        return e
    if not isinstance(e, dict) or "old_string" not in e or "new_string" not in e:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"edits[{i}] must be an object with old_string, new_string and optional replace_all.",
        )
    ra = e.get("replace_all", False)
    if not isinstance(ra, bool):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"edits[{i}].replace_all must be a bool.")
    return EditSpec(
        check_text(e["old_string"], f"edits[{i}].old_string", limit),
        check_text(e["new_string"], f"edits[{i}].new_string", limit),
        ra,
    )
