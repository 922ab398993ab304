"""Session: one agent session's operations (read, write, edit, multi_edit, undo, leases)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from coordinator import arguments
from coordinator.arguments import check_text as _check_text
from coordinator.arguments import opt_int as _opt_int
from coordinator.disk import fsio
from coordinator.engine.calls import DEFAULT_OPTIONS, CallOptions
from coordinator.engine.options import Match, Policy
from coordinator.engine.plan import CurrentFile, Edits, WritePlan
from coordinator.engine.results import ReadResult, WriteResult, evolve, set_message
from coordinator.engine.steps import CheckedWrite
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import HistoryEntry
from coordinator.state.events import Notice
from coordinator.state.leases import DEFAULT_TTL_S as DEFAULT_LEASE_TTL_S
from coordinator.state.leases import Lease
from coordinator.text import rebase, semantics, undoing
from coordinator.text.codecs import Encoding, decode_bytes, encode_text
from coordinator.text.placeholders import check_placeholder

if TYPE_CHECKING:
    from coordinator.engine.coordinator import Coordinator


class Session:
    """One agent session. Cheap to create; all its state lives in Redis.

    policy: "strict" or "rebase" for this session's edits (None: the coordinator's).
    match: "exact" or "flexible" matching of old_string (None: the coordinator's).
    options: how this session's calls are shaped (calls.py: not waiting for a busy lock); `with_options`
        gives the same session with others.
    """

    def __init__(
        self,
        coord: Coordinator,
        session_id: str,
        policy: Policy | None = None,
        match: Match | None = None,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> None:
        self.coord = coord
        self.id = session_id
        self.policy: Policy = policy if policy is not None else coord.policy
        self.match: Match = match if match is not None else coord.match
        self.options = options

    def with_options(self, options: CallOptions) -> Session:
        """This session, its calls made with `options` (calls.py); this one keeps its own."""
        return Session(self.coord, self.id, self.policy, self.match, options)

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        """Read lines of a text file; records this session's view of the whole file."""
        return self.coord.reader.read(self.id, path, offset, limit, self.policy)

    def notices(self) -> Notice | None:
        """Files this session read that another session has written since (`Coordinator.notices`)."""
        return self.coord.notices(self.id)

    # -- leases -------------------------------------------------------------------------------------------
    def lease(
        self, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = DEFAULT_LEASE_TTL_S
    ) -> list[Lease]:
        """Reserve paths or globs (`src/app.py`, `src/**/*.py`, `docs/`) for `ttl_s` seconds, all or none.

        exclusive: other sessions' writes, edits and undos of covered paths are refused with `leased`
        (reads stay free). shared: only other sessions' exclusive leases are kept out. Refused with `leased`
        when another session holds a conflicting lease. Renew before the end with `renew`; a lease that
        ran out refuses this session's next write under it once (fencing), so lease again and read again.
        """
        patterns = [paths] if isinstance(paths, str) else list(paths)
        return self.coord.lease_gate.grant(self.id, patterns, mode, ttl_s)

    def renew(self, lease_id: str | None = None, ttl_s: float = DEFAULT_LEASE_TTL_S) -> list[Lease]:
        """Extend one live lease (or all of this session's) to end `ttl_s` from now; same tokens."""
        return self.coord.lease_gate.renew(self.id, lease_id, ttl_s)

    def release(self, lease_id: str | None = None, pattern: str | None = None) -> int:
        """End this session's leases: one by id, those on one pattern, or all. Returns how many ended."""
        return self.coord.lease_gate.release(self.id, lease_id, pattern)

    def leases(self) -> list[Lease]:
        """This session's live leases."""
        return [x for x in self.coord.leases() if x.session == self.id]

    def write(self, path: str, content: str) -> WriteResult:
        """Create or overwrite a file. An existing file must have been read, and be unchanged since."""
        content = _check_text(content, "content", self.coord.max_file_bytes)

        def transform(cur: CurrentFile) -> WritePlan:
            encoding = cur.decoded().encoding if cur.exists else Encoding.UTF8
            if cur.exists and self.coord.placeholders == "refuse":
                old = cur.decoded().text
                check_placeholder(old, old, content, what="content")
            new = encode_text(content, encoding)
            return WritePlan(new_data=new, new_text=content, replacements=0, inserted_len=len(content))

        return self.coord.writer.check_then_write(
            CheckedWrite(self.id, path, "write", transform, True, self.policy, _write_message, self.options)
        )

    def edit(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        """Replace `old_string` with `new_string` (exactly once, or every time with replace_all)."""
        spec = arguments.check_edit_pair(old_string, new_string, replace_all, self.coord.max_file_bytes)
        return self._edits(path, [spec], "edit")

    def multi_edit(self, path: str, edits: Sequence[dict[str, Any] | semantics.EditSpec]) -> WriteResult:
        """Several edits of one file, applied in order, all or nothing, in one critical section."""
        specs = arguments.check_edits(edits, self.coord.max_file_bytes)
        return self._edits(path, specs, "multi_edit")

    def _edits(self, path: str, specs: list[semantics.EditSpec], operation: str) -> WriteResult:
        creating = specs[0].old_string == ""
        if self.coord.placeholders == "refuse":
            # Judged on the edit itself (what it takes out, what it puts in), so it holds for a rebased edit
            # too: a marker that is already in old_string is not a new one.
            for i, spec in enumerate(specs):
                what = "new_string" if len(specs) == 1 else f"edits[{i}].new_string"
                check_placeholder(spec.old_string, spec.old_string, spec.new_string, what=what)
        finish = _filled_message if creating else _edit_message
        return self.coord.writer.check_then_write(
            CheckedWrite(
                self.id, path, operation, Edits(specs, self.match), creating, self.policy, finish, self.options
            )
        )

    def undo(self, path: str, version: int | None = None) -> WriteResult:
        """Revert one write's change, keeping everything written since (see undoing.py).

        version=None: this session's newest write of `path` still in effect (repeated calls step back
        through them). version=N: version N, whoever wrote it. The inverse of that write's change is
        carried onto the current file with the merge rule of `rebase`; a later write that overlaps it makes
        the undo `stale`, nothing written. Needs this session's current view, like any write, and is itself
        recorded (so `redo`, or an undo of the undo, brings the change back).
        """
        version = _opt_int(version, "version", minimum=1)
        rp = self.coord.resolve(path)
        entries = self.coord.history_store.entries(rp.key)
        if version is None:
            target = undoing.undo_target(entries, self.id, rp.shown)
        else:
            target = undoing.version_target(entries, version, rp.shown)
        return self._revert(rp, entries, target)

    def redo(self, path: str) -> WriteResult:
        """Bring back the change of this session's newest undo of `path` (an undo of that undo)."""
        rp = self.coord.resolve(path)
        entries = self.coord.history_store.entries(rp.key)
        return self._revert(rp, entries, undoing.redo_target(entries, self.id, rp.shown))

    def _revert(self, rp: fsio.ResolvedPath, entries: Sequence[HistoryEntry], target: HistoryEntry) -> WriteResult:
        store = self.coord.history_store
        before = None if target.before is None else store.load(target.before, rp.key)
        after: bytes | None = None
        if target.after is not None:
            try:
                after = store.load(target.after, rp.key)
            except CoordinatorError:
                after = None  # not kept: only usable if the file still holds exactly that content
        operation = undoing.operation_for(target)
        what = f"the {operation} of version {target.version}"

        def transform(cur: CurrentFile) -> WritePlan:
            if target.after is not None and after is None and cur.digest != target.after:
                raise CoordinatorError(
                    ErrorCode.STALE,
                    f"{rp.shown}: {what} cannot be carried out: the content version {target.version} wrote is "
                    "no longer kept, and the file has changed since. Nothing was written.",
                    reason="not_revertible",
                )
            data = cur.data if cur.exists else None
            new, carried = undoing.revert(
                before, after if after is not None else data, data, cur.digest, target.after, rp.shown, what
            )
            if new is None:
                return WritePlan(new_data=None)
            try:
                text: str | None = decode_bytes(new).text
            except CoordinatorError:
                text = None
            if carried is None:  # the file is as that write left it: swapped back whole
                first, length = _region(cur, text)
                return WritePlan(new_data=new, new_text=text, first_offset=first, inserted_len=length)
            nearby = tuple((c.first, c.last) for c in carried.nearby if c.last >= c.first)
            return WritePlan(
                new_data=new,
                new_text=text,
                first_offset=carried.first_offset,
                inserted_len=carried.inserted_len,
                nearby=nearby,
            )

        try:
            return self.coord.writer.check_then_write(
                CheckedWrite(
                    self.id,
                    rp.key,
                    operation,
                    transform,
                    may_create=True,
                    policy=self.policy,
                    finish=lambda res: _with_message(res, _revert_message(res, target, entries, self.id)),
                    options=self.options,
                    reverts=target.version,
                )
            )
        except CoordinatorError as exc:
            if exc.code is ErrorCode.STALE and "clashing" in exc.details:
                exc.message += _later_writers(entries, target.version)
            raise

    def restore(
        self, path: str, to_version: int | None = None, *, before_version: int | None = None, operation: str = "restore"
    ) -> WriteResult:
        """Put the whole file back as it was right after `to_version` (0: before the first recorded
        version) or right before `before_version`, discarding every later version: an explicit operation
        for people (`Coordinator.restore`), not an undo. Needs this session's current view, like any write;
        recorded as `operation` ("restore"; the command line's whole-file `undo` records "undo"), and the
        message lists the versions discarded."""
        if (to_version is None) == (before_version is None):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give exactly one of to_version and before_version.")
        to_version = _opt_int(to_version, "to_version", minimum=0)
        before_version = _opt_int(before_version, "before_version", minimum=1)
        rp = self.coord.resolve(path)
        entries = self.coord.history_store.entries(rp.key)
        digest, label, discarded = _restore_point(entries, rp.shown, to_version, before_version)
        content = None if digest is None else self.coord.history_store.load(digest, rp.key)

        def transform(cur: CurrentFile) -> WritePlan:
            if content is None:
                if not cur.exists:
                    raise CoordinatorError(ErrorCode.NO_CHANGE, f"{rp.shown} is already absent, as {label}.")
                return WritePlan(new_data=None)
            if cur.exists and cur.data == content:
                raise CoordinatorError(ErrorCode.NO_CHANGE, f"{rp.shown} already has its content {label}.")
            try:
                text: str | None = decode_bytes(content).text
            except CoordinatorError:
                text = None
            first, length = _region(cur, text)
            return WritePlan(new_data=content, new_text=text, first_offset=first, inserted_len=length)

        def finish(res: WriteResult) -> WriteResult:
            what = "removed (it did not exist then)" if res.hash is None else "restored"
            ordered = sorted(discarded, key=lambda e: e.version)
            gone = ", ".join(f"{e.version} ({e.operation} by {e.session})" for e in ordered)
            kept = tuple({"version": e.version, "session": e.session, "operation": e.operation} for e in ordered)
            res = evolve(res, discarded=kept)
            msg = f"{res.path} {what}: back to its content {label} (now version {res.version})."
            if gone:
                msg += f" Discarded the changes of version{'s' if len(discarded) != 1 else ''} {gone}."
            return _with_message(res, msg)

        return self.coord.writer.check_then_write(
            CheckedWrite(self.id, rp.key, operation, transform, True, self.policy, finish, self.options)
        )


def _region(cur: CurrentFile, new_text: str | None) -> tuple[int, int]:
    """(first_offset, inserted_len) of a whole-content swap (undo, redo, restore): the lines that differ
    from the file as found, so the snippet and the history's line range show the change, not the file."""
    if new_text is None:
        return 0, 0
    try:
        old_text = cur.decoded().text if cur.exists else ""
    except CoordinatorError:
        old_text = ""  # binary before: all of the new text is new
    return rebase.changed_region(old_text, new_text)


def _revert_message(res: WriteResult, target: HistoryEntry, entries: Sequence[HistoryEntry], session: str) -> str:
    who = "your" if target.session == session else f"{target.session}'s"
    msg = f"Reverted {who} {target.operation} of version {target.version} of {res.path} (now version {res.version})."
    if res.hash is None:
        msg = f"{res.path} removed: reverted {who} {target.operation} of version {target.version}, which created it."
    later = [e for e in entries if e.version > target.version and e.session != session]
    if later:
        msg += f" {len(later)} later write{'s' if len(later) != 1 else ''} by others kept."
    if res.nearby_changes:
        msg += f" Others changed lines {_spans(res.nearby_changes)} next to it: read them before relying on them."
    return msg


def _restore_point(
    entries: Sequence[HistoryEntry], shown: str, to_version: int | None, before_version: int | None
) -> tuple[str | None, str, list[HistoryEntry]]:
    """(content hash to put back or None for no file, "right after version N" / "before version N", the
    versions discarded)."""
    if before_version is not None:
        target = next((e for e in entries if e.version == before_version), None)
        if target is None:
            known = ", ".join(str(e.version) for e in entries[:10]) or "none"
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, f"{shown} has no version {before_version} (newest versions: {known})."
            )
        return target.before, f"before version {before_version}", [e for e in entries if e.version >= before_version]
    assert to_version is not None
    if to_version == 0:
        if not entries:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{shown} has no recorded versions.")
        first = min(entries, key=lambda e: e.version)
        return first.before, f"before version {first.version}", list(entries)
    target = next((e for e in entries if e.version == to_version), None)
    if target is None:
        known = ", ".join(str(e.version) for e in entries[:10]) or "none"
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"{shown} has no version {to_version} (newest versions: {known})."
        )
    return target.after, f"right after version {to_version}", [e for e in entries if e.version > to_version]


def _later_writers(entries: Sequence[HistoryEntry], version: int) -> str:
    later = sorted((e for e in entries if e.version > version), key=lambda e: e.version)
    if not later:
        return ""
    parts = [f"{e.session} (version {e.version}, {_spans(((e.first_line, e.last_line),))})" for e in later[-6:]]
    return " Written since by: " + ", ".join(parts) + "."


def _spans(ranges: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:8])


def _write_message(res: WriteResult) -> WriteResult:
    verb = "created" if res.created else "updated"
    return _with_message(res, f"File {verb} successfully at: {res.path}")


def _edit_message(res: WriteResult, filled: bool = False) -> WriteResult:
    """`filled`: an empty old_string on an existing file (one that held only whitespace), as Claude Code
    says it: the empty file was filled, not "updated (1 replacement)"."""
    if res.created:
        return _with_message(res, f"Created {res.path}.")
    if filled:
        msg = f"The file {res.path} was empty and has been filled with new_string."
    else:
        n = res.replacements
        msg = f"The file {res.path} has been updated ({n} replacement{'s' if n != 1 else ''})."
    if res.match_lines is not None:
        msg += " " + _flexible_sentence(res)
    if res.rebased:
        msg += " " + _rebase_sentence(res)
    return _with_message(res, msg, f"Snippet (around line {res.start_line} after the edit):")


def _filled_message(res: WriteResult) -> WriteResult:
    """`_edit_message` of an edit with an empty old_string (one that creates or fills the file)."""
    return _edit_message(res, filled=True)


def _flexible_sentence(res: WriteResult) -> str:
    assert res.match_lines is not None
    a, b = res.match_lines
    where = f"line {a}" if a == b else f"lines {a}-{b}"
    how = "with trailing whitespace ignored" if res.match == "trailing_whitespace" else "with the indentation shifted"
    extra = " (new_string re-indented by the same shift)" if res.match == "indentation" else ""
    return f"old_string matched {where} of the file only {how}{extra}; check the snippet."


def _with_message(res: WriteResult, message: str, tail: str = "") -> WriteResult:
    if res.warnings:
        message += " Warning: " + " ".join(res.warnings)
    if res.notice:
        message += " Note: " + res.notice
    if tail:
        message += " " + tail
    return set_message(res, message)  # `res` is the engine's draft, handed to `finish` (results.set_message)


def _rebase_sentence(res: WriteResult) -> str:
    """What a rebased edit tells the agent: it went through on top of others' changes it has not seen."""
    n = res.intervening_writes
    who = list(res.intervening_sessions[:6])
    if len(res.intervening_sessions) > 6:
        who.append(f"{len(res.intervening_sessions) - 6} more")
    spans = [f"{a}" if a == b else f"{a}-{b}" for a, b in res.changed_lines[:8]]
    if not spans:
        where = ""
    elif len(spans) == 1 and "-" not in spans[0]:
        where = f"; now at line {spans[0]}"
    else:
        where = f"; now at lines {', '.join(spans)}"
    writes = f"{n} write{'s' if n != 1 else ''} by {', '.join(who)}" if n else "other writes"
    near = ""
    if res.nearby_changes:
        near = f" Lines {_spans(res.nearby_changes)}, right next to your edit, are among them."
    if res.placed_after:
        near += (
            f" Another write inserted lines {_spans(res.placed_after)} at the very point where your edit inserts:"
            " your lines were put after them (the order of the writes)."
        )
    if res.placed_before:
        near += (
            f" Another write inserted lines {_spans(res.placed_before)} at the very point where your edit inserts:"
            " your lines were put before them, right after the text your old_string ends with."
        )
    return (
        f"The file had changed since you read it ({writes}{where}), in lines your edit does not change, so "
        f"your edit was applied on top of those changes.{near} You have not seen them: read those lines "
        "before relying on them."
    )
