"""The read: the file's bytes (no lock: writes replace files atomically), the lines asked for, and the
session's new view recorded in Redis in one round trip (with any notice lookups)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from coordinator.arguments import opt_int
from coordinator.disk import fsio
from coordinator.engine.leasing import LeaseGate
from coordinator.engine.options import Policy
from coordinator.engine.record import notice_rider
from coordinator.engine.resources import Disk, StateAccess
from coordinator.engine.results import ReadResult, render_lines
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import content_hash
from coordinator.state.views import KIND_READ, ReadState
from coordinator.text import semantics
from coordinator.text.codecs import Decoded, decode_bytes


@dataclass(frozen=True)
class _Lines:
    """The lines a read returns."""

    chosen: list[str]
    start: int  # 1-based
    total: int
    content: str  # the chosen lines, LF line ends


def _select(decoded: Decoded, offset: int | None, limit: int) -> _Lines:
    lines = semantics.split_lines(decoded.text)
    total = len(lines)
    start = max(offset or 1, 1)
    chosen = lines[start - 1 : start - 1 + limit]
    content = "\n".join(chosen)
    if chosen and (start - 1 + len(chosen) < total or decoded.text.endswith("\n")):
        content += "\n"
    return _Lines(chosen, start, total, content)


def _render(shown: str, sel: _Lines, unchanged: bool) -> tuple[str, str]:
    """The text a model sees, and the short message."""
    start, total, chosen = sel.start, sel.total, sel.chosen
    if unchanged:
        return (
            f"File unchanged since your last read of {shown} (same lines, same content). "
            "What you read before is still current; refer to it instead of reading again."
        ), "unchanged"
    return render_lines(shown, chosen, start, total)


def missing_file(rp: fsio.ResolvedPath, root: str, root_fd: int) -> CoordinatorError:
    """file_not_found with a "Did you mean" hint (computed outside any lock)."""
    hint = None
    names = fsio.list_parent(rp, root, root_fd)  # never an outside folder's names
    suggestion = semantics.suggest_path(rp.name, names)
    if suggestion is not None:
        folder = rp.key.rpartition("/")[0]
        hint = f"{folder}/{suggestion}" if folder else suggestion
    msg = f"File does not exist: {rp.shown}."
    if hint:
        msg += f" Did you mean {hint}?"
    else:
        msg += " Check the path (it is relative to the repository root), or create the file with Write."
    return CoordinatorError(ErrorCode.FILE_NOT_FOUND, msg, path=rp.key, suggestion=hint)


class Reader:
    """The read, and the recording of a session's view (also of a view an agent's own read gave, native.py).
    Its collaborators are the Coordinator's: the disk and the read state (resources.py), the lease gate
    (its refresh rides the read's round trip)."""

    def __init__(
        self, disk: Disk, access: StateAccess, lease_gate: LeaseGate, *, max_read_bytes: int, default_read_lines: int
    ) -> None:
        self.disk = disk
        self.access = access
        self.lease_gate = lease_gate
        self.max_read_bytes = max_read_bytes
        self.default_read_lines = default_read_lines

    def read(
        self, session: str, path: str, offset: int | None, limit: int | None, policy: Policy = "strict"
    ) -> ReadResult:
        off = opt_int(offset, "offset", minimum=0)
        lim = opt_int(limit, "limit", minimum=1)
        rp = fsio.resolve(self.disk.root, path)
        data, st = self._read_bytes(rp, lim)
        decoded = decode_bytes(data)
        digest = content_hash(data)
        sel = _select(decoded, off, lim if lim is not None else self.default_read_lines)
        if policy == "rebase":
            # What this session saw, for a later rebase: here in memory; on disk, the next coordinator write
            # keeps these very bytes as its pre-image (shared by every session that read this version).
            self.access.texts.put(digest, decoded.text)
        rs = ReadState(digest, st.st_mtime_ns, st.st_size, off or 0, lim or 0, time.time(), KIND_READ)
        prev, notice = self.record_read(session, rp.key, rs)
        unchanged = (
            prev is not None
            and prev.kind == KIND_READ
            and prev.hash == digest
            and prev.offset == rs.offset
            and prev.limit == rs.limit
        )
        text, message = _render(rp.shown, sel, unchanged)
        return ReadResult(
            path=rp.key,
            content=sel.content,
            text=text,
            start_line=sel.start,
            num_lines=len(sel.chosen),
            total_lines=sel.total,
            unchanged=unchanged,
            hash=digest,
            encoding=decoded.encoding.value,
            line_ending="crlf" if semantics.detect_eol(decoded.text) == "\r\n" else "lf",
            message=message,
            notice=notice,
        )

    def _read_bytes(self, rp: fsio.ResolvedPath, limit: int | None) -> tuple[bytes, os.stat_result]:
        try:
            dfd = fsio.open_parent(rp, self.disk.root, root_fd=self.disk.root_fd)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                raise missing_file(rp, self.disk.root, self.disk.root_fd) from None
            raise
        try:
            found = fsio.read_at(dfd, rp, self.disk.max_file_bytes)
        finally:
            os.close(dfd)
        if found is None:
            raise missing_file(rp, self.disk.root, self.disk.root_fd)
        data, st = found
        if limit is None and len(data) > self.max_read_bytes:
            raise CoordinatorError(
                ErrorCode.TOO_LARGE,
                f"{rp.shown!r} is {len(data)} bytes, more than {self.max_read_bytes} bytes can be read at "
                "once. Read it in parts with offset and limit (for example offset=1, limit=500), or search "
                "it for the part you need.",
                path=rp.key,
                size=len(data),
                limit=self.max_read_bytes,
            )
        return data, st

    def record_read(self, session: str, key: str, rs: ReadState) -> tuple[ReadState | None, str]:
        """S's view of P becomes `rs` (one round trip, with the notice lookups); the previous one is returned."""
        notice_extra, finish = notice_rider(self.access.tracker, self.access.store, session, key)
        lease_extra, apply_leases = self.lease_gate.rider()

        def extra(pipe: Any) -> None:
            if lease_extra is not None:
                lease_extra(pipe)  # first: its reply is replies[0]
            if notice_extra is not None:
                notice_extra(pipe)  # last: the notice reads the last replies

        prev, replies = self.access.call(lambda: self.access.store.record_read_with(session, key, rs, extra))
        if lease_extra is not None:
            apply_leases(replies[0])
        self.access.views.put(session, key, rs)
        if self.access.tracker is not None:
            self.access.tracker.saw(session, key, rs.hash)
        return prev, finish(replies)
