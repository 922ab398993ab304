"""What the engine returns: the results of reads and writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from coordinator.frozen import fast_init, made_from
from coordinator.text import semantics


def render_lines(shown: str, chosen: list[str], start: int, total: int) -> tuple[str, str]:
    """The one rendering of a read's lines for a model: (text, short message). `shown`: the path as the
    model knows it; `chosen`: the lines returned, starting at line `start` (1-based) of `total`."""
    if total == 0:
        return f"The file {shown} exists but is empty (0 lines).", "empty"
    if start > total:
        return (
            f"The file {shown} has {total} lines; offset {start} is past the end. Use an offset between 1 and {total}."
        ), "offset_past_end"
    message = ""
    if start - 1 + len(chosen) < total:
        message = (
            f"Showing lines {start}-{start + len(chosen) - 1} of {total}; read on with offset={start + len(chosen)}."
        )
    return semantics.number_lines(chosen, start), message


@fast_init
@dataclass(frozen=True)
class ReadResult:
    path: str
    content: str  # the returned lines, LF line ends, no numbers
    text: str  # numbered rendering for a model (cat -n style), or the short "unchanged" answer
    start_line: int
    num_lines: int
    total_lines: int
    unchanged: bool
    hash: str
    encoding: str
    line_ending: str
    message: str = ""
    notice: str = ""  # "N files you read have changed since: ..." (other files than this one)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines_text(self) -> tuple[str, str]:
        """(text, message) of these lines as a first read shows them, also when `text` is the short
        "unchanged" answer (for a caller that never showed the model what the session read before)."""
        lines = semantics.split_lines(self.content)
        return render_lines(self.path, lines, self.start_line, self.total_lines)


@fast_init
@dataclass(frozen=True)
class WriteResult:
    """Result of a write, edit, multi_edit or undo."""

    path: str
    operation: str
    created: bool
    version: int
    hash: str | None
    message: str
    replacements: int = 0
    start_line: int = 1
    snippet: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # policy "rebase": the edit was carried over onto changes made since this session's view
    rebased: bool = False
    changed_lines: tuple[tuple[int, int], ...] = ()  # what others changed, line ranges of the new file
    intervening: tuple[dict[str, Any], ...] = ()  # the newest of those writes: version, session, lines
    intervening_writes: int = 0  # how many writes by other sessions since this session's view
    intervening_sessions: tuple[str, ...] = ()  # by whom
    notice: str = ""  # "N files you read have changed since: ..." (other files than this one)
    lease_token: int | None = None  # the fencing token of the writer's own lease it was made under
    # how old_string was found: exact, quotes, or (match="flexible") trailing_whitespace / indentation
    match: str = "exact"
    match_lines: tuple[int, int] | None = None  # a flexible match: the lines of the old file it spanned
    nearby_changes: tuple[tuple[int, int], ...] = ()  # others' changes within 3 lines of this one (new file)
    reverts: int | None = None  # undo / redo: the version whose change was reverted
    discarded: tuple[dict[str, Any], ...] = ()  # restore: the versions discarded (version, session, operation)
    # policy "rebase": the edit's change was already in the file (made by another write); nothing written
    already_made: bool = False
    # policy "rebase": others' insertions at the very point where this edit inserted, which its lines were
    # put after (the order of the writes) or before (its old_string anchored them there); lines of the new file
    placed_after: tuple[tuple[int, int], ...] = ()
    placed_before: tuple[tuple[int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        d["changed_lines"] = [list(r) for r in self.changed_lines]
        d["nearby_changes"] = [list(r) for r in self.nearby_changes]
        d["match_lines"] = list(self.match_lines) if self.match_lines else None
        d["intervening"] = [dict(x) for x in self.intervening]
        d["discarded"] = [dict(x) for x in self.discarded]
        d["placed_after"] = [list(r) for r in self.placed_after]
        d["placed_before"] = [list(r) for r in self.placed_before]
        return d


EditResult = WriteResult

_WRITE_FIELDS = frozenset(f.name for f in fields(WriteResult))
#: WriteResult's field names in field order: the order of the dict its `__init__` fills, and of `result_of`'s.
WRITE_FIELD_ORDER = tuple(f.name for f in fields(WriteResult))


def result_of(values: dict[str, Any]) -> WriteResult:
    """The WriteResult whose instance dict is `values`, for the write path, which makes one per write: no
    keyword call, no generated `__init__` between (about half the cost), and `values` is taken as it is,
    not copied (the caller hands it over and keeps no reference).

    Invariant, the caller's: `values` holds every field of WriteResult, each once, in field order
    (`WRITE_FIELD_ORDER`), with values of the fields' types; the instance is then the one
    `WriteResult(**values)` makes, equal to it, frozen, with the same `to_dict`
    (tests/coordinator/engine/test_results.py checks a write's result field by field)."""
    return made_from(WriteResult, values)


def with_message(res: WriteResult, message: str) -> WriteResult:
    """`evolve(res, message=message)`, without the keyword call and the field check (the Session's message
    functions make one per write)."""
    return made_from(WriteResult, {**res.__dict__, "message": message})


def set_message(draft: WriteResult, message: str) -> WriteResult:
    """`draft` with its message set in place, for the message functions a Session gives the
    check-then-write as `finish`: no copy of WriteResult's 23 fields per write.

    Invariant, the engine's (record.py, `Recorder._result`): what it hands to `finish` is a draft it made
    for this call and shows nobody else; after `finish` it reads the draft only through `evolve`, which
    copies it (and a second `finish` sets the message again from the fields, not from the old message).
    Anything that may hold a published result uses `with_message`."""
    draft.__dict__["message"] = message
    return draft


def evolve(res: WriteResult, **changes: Any) -> WriteResult:
    """`dataclasses.replace` for the write path: a copy of `res` with `changes` (field names only). Made
    by copying the instance's dict, since the result has no `__post_init__` to run: far cheaper than
    `replace` over WriteResult's 25 fields (BENCHMARKS.md, "Figures behind design choices")."""
    if not _WRITE_FIELDS.issuperset(changes):
        raise TypeError(f"WriteResult has no field {sorted(changes.keys() - _WRITE_FIELDS)[0]!r}")
    return made_from(WriteResult, {**res.__dict__, **changes})
