"""Session: one agent session's operations (read, write, edit, multi_edit, undo, leases)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import arguments, semantics
from ..arguments import check_text as _check_text
from ..arguments import opt_int as _opt_int
from ..errors import CoordinatorError, ErrorCode
from ..leases import Lease
from ..textio import Encoding, decode_bytes, encode_text
from .options import Policy
from .plan import _Current, _Missing, _Plan
from .results import ReadResult, WriteResult

if TYPE_CHECKING:
    from .coordinator import Coordinator


class Session:
    """One agent session. Cheap to create; all its state lives in Redis.

    policy: "strict" or "rebase" for this session's edits (None: the coordinator's).
    """

    def __init__(self, coord: Coordinator, session_id: str, policy: Policy | None = None) -> None:
        self.coord = coord
        self.id = session_id
        self.policy: Policy = policy if policy is not None else coord.policy

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        """Read lines of a text file; records this session's view of the whole file."""
        return self.coord._read(self.id, path, offset, limit, self.policy)

    # -- leases -------------------------------------------------------------------------------------------
    def lease(self, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = 300.0) -> list[Lease]:
        """Reserve paths or globs (`src/app.py`, `src/**/*.py`, `docs/`) for `ttl_s` seconds, all or none.

        exclusive: other sessions' writes, edits and undos of covered paths are refused with `leased`
        (reads stay free). shared: only other sessions' exclusive leases are kept out. Refused with `leased`
        when another session holds a conflicting lease. Renew before the end with `renew`; a lease that
        ran out refuses this session's next write under it once (fencing), so lease again and read again.
        """
        patterns = [paths] if isinstance(paths, str) else list(paths)
        return self.coord._lease(self.id, patterns, mode, ttl_s)

    def renew(self, lease_id: str | None = None, ttl_s: float = 300.0) -> list[Lease]:
        """Extend one live lease (or all of this session's) to end `ttl_s` from now; same tokens."""
        return self.coord._renew(self.id, lease_id, ttl_s)

    def release(self, lease_id: str | None = None, pattern: str | None = None) -> int:
        """End this session's leases: one by id, those on one pattern, or all. Returns how many ended."""
        return self.coord._release(self.id, lease_id, pattern)

    def leases(self) -> list[Lease]:
        """This session's live leases."""
        return [x for x in self.coord.lease_store.live() if x.session == self.id]

    def write(self, path: str, content: str) -> WriteResult:
        """Create or overwrite a file. An existing file must have been read, and be unchanged since."""
        content = _check_text(content, "content", self.coord.max_file_bytes)

        def transform(cur: _Current) -> _Plan:
            encoding = cur.decoded().encoding if cur.exists else Encoding.UTF8
            new = encode_text(content, encoding)
            return _Plan(new_data=new, new_text=content, replacements=0, inserted_len=len(content))

        return self.coord.check_then_write(
            self.id, path, "write", transform, may_create=True, policy=self.policy, finish=_write_message
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

        def transform(cur: _Current) -> _Plan:
            if not cur.exists:
                if not creating:
                    raise _Missing
                text, encoding = "", Encoding.UTF8
            else:
                d = cur.decoded()
                text, encoding = d.text, d.encoding
            out = semantics.apply_edits(text, specs) if len(specs) > 1 else _one(text, specs[0])
            return _Plan(
                new_data=encode_text(out.text, encoding),
                new_text=out.text,
                replacements=out.replacements,
                first_offset=out.first_offset,
                inserted_len=out.inserted_len,
            )

        return self.coord.check_then_write(
            self.id,
            path,
            operation,
            transform,
            may_create=creating,
            policy=self.policy,
            specs=specs,
            finish=_edit_message,
        )

    def undo(self, path: str, version: int | None = None) -> WriteResult:
        """Restore `path` to its content just before a recorded write.

        version=None: before this session's last write of `path`. version=N: before version N was written
        (so N and everything after it are undone). The restore runs through the check-then-write: it needs
        this session's current view of the file, and is itself recorded in history (and so undoable).
        """
        version = _opt_int(version, "version", minimum=1)
        rp = self.coord.resolve(path)
        entries = self.coord.history_store.entries(rp.key)
        if version is None:
            target = next((e for e in entries if e.session == self.id), None)
            if target is None:
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"This session has no recorded write of {rp.shown} to undo. Pass a version from its "
                    "history instead.",
                )
        else:
            target = next((e for e in entries if e.version == version), None)
            if target is None:
                known = ", ".join(str(e.version) for e in entries[:10]) or "none"
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{rp.shown} has no version {version} (newest versions: {known}).",
                )
        restore = None if target.before is None else self.coord.history_store.load(target.before, rp.key)

        def transform(cur: _Current) -> _Plan:
            if restore is None:
                if not cur.exists:
                    raise CoordinatorError(ErrorCode.NO_CHANGE, f"{rp.shown} is already absent.")
                return _Plan(new_data=None)
            if cur.exists and cur.data == restore:
                raise CoordinatorError(
                    ErrorCode.NO_CHANGE,
                    f"{rp.shown} already has the content it had before version {target.version}.",
                )
            try:
                text = decode_bytes(restore).text
            except CoordinatorError:
                text = None
            return _Plan(new_data=restore, new_text=text, inserted_len=len(text or ""))

        def finish(res: WriteResult) -> WriteResult:
            what = "removed (it did not exist before)" if res.hash is None else "restored"
            return _with_message(
                res,
                f"{res.path} {what}: back to its content before version {target.version} (now version {res.version}).",
            )

        return self.coord.check_then_write(
            self.id, path, "undo", transform, may_create=True, policy=self.policy, finish=finish
        )


def _write_message(res: WriteResult) -> WriteResult:
    verb = "created" if res.created else "updated"
    return _with_message(res, f"File {verb} successfully at: {res.path}")


def _edit_message(res: WriteResult) -> WriteResult:
    if res.created:
        return _with_message(res, f"Created {res.path}.")
    n = res.replacements
    msg = f"The file {res.path} has been updated ({n} replacement{'s' if n != 1 else ''})."
    if res.rebased:
        msg += " " + _rebase_sentence(res)
    return _with_message(res, msg, f"Snippet (around line {res.start_line} after the edit):")


def _one(text: str, spec: semantics.EditSpec) -> semantics.EditOutcome:
    return semantics.apply_edit(text, spec.old_string, spec.new_string, spec.replace_all)


def _with_message(res: WriteResult, message: str, tail: str = "") -> WriteResult:
    from dataclasses import replace

    if res.warnings:
        message += " Warning: " + " ".join(res.warnings)
    if res.notice:
        message += " Note: " + res.notice
    if tail:
        message += " " + tail
    return replace(res, message=message)


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
    return (
        f"The file had changed since you read it ({writes}{where}), away from the lines you "
        "edited, so your edit was applied on top of those changes. You have not seen them: read those lines "
        "before relying on them."
    )
