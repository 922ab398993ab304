"""Write-ticket marks: a granted write ticket (an agent's exclusive lease of one path, engine/agentwrites.py)
recorded on disk beside its path's lock, so that a writer of any process finds the ticket under the very lock
it writes under, whatever lease snapshot it decided on before taking the lock (engine/leasing.py).

    <state dir>/tickets/<lock name>.ticket    `MAGIC`, then one JSON object: {"i": the lease id, "s": the
                                              holder session's tag (`session_tag`), "e": the lease's end,
                                              unix seconds}

No file: no ticket (what every writer finds on a path nobody holds a ticket for, told by one `access` call).
Any other content is an unreadable mark (a grant whose process died while writing it, or a short write on a
full disk): its reader asks Redis.

Marks are written, read and removed only with the path's lock held (every method takes the held lock), so a
mark is never seen half-written by a live writer, and a writer that holds the lock sees every mark written
before it took it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import xxhash

from coordinator.disk.locks import HeldLock, lock_name

__all__ = ["MAGIC", "TicketMark", "TicketMarks", "session_tag"]

MAGIC = b"edit-coordinator write ticket 1\n"
_SESSION_MAX = 200  # longer session ids are kept as their hash (a mark stays one small write)
_READ_MAX = 4096  # a mark is far shorter: a longer file is not a mark of ours (read as unreadable)
_SUFFIX = ".ticket"
_NAMES_MAX = 4096


def session_tag(session: str) -> str:
    """How a mark names its holder: the session id, or its hash when the id is long."""
    if len(session) <= _SESSION_MAX:
        return session
    return "#" + xxhash.xxh3_128_hexdigest(session.encode("utf-8", "surrogateescape"))


@dataclass(frozen=True)
class TicketMark:
    """A mark as read. `raw`: its bytes (what a writer that had it judged by Redis remembers it by). An
    unreadable mark has no lease id, no holder and no end."""

    lease_id: str
    holder: str
    ends_at: float
    raw: bytes

    @property
    def readable(self) -> bool:
        return bool(self.lease_id)

    def held_by(self, session: str) -> bool:
        return self.readable and self.holder == session_tag(session)


class TicketMarks:
    """The marks folder of one state folder (module docstring). Raises OSError."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._dfd: int | None = None
        self._names: dict[str, str] = {}  # the mark file names of the keys looked at lately (bounded)

    def _dir(self) -> int:
        if self._dfd is None:
            self._dfd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self._dfd

    def close(self) -> None:
        if self._dfd is not None:
            os.close(self._dfd)
            self._dfd = None

    def path_for(self, key: str) -> Path:
        return self.folder / self._name(key)

    def _name(self, key: str) -> str:
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= _NAMES_MAX:
                self._names.clear()
            name = self._names[key] = lock_name(key)[: -len(".lock")] + _SUFFIX
        return name

    def present(self, held: HeldLock) -> bool:
        """Whether `held`'s path has a mark (readable or not): one `access` call (every write asks it: kept
        short; a mark is never a link, `write` refuses to make one)."""
        name = self._names.get(held.key)
        dfd = self._dfd
        if name is None or dfd is None:
            name, dfd = self._name(held.key), self._dir()
        return os.access(name, os.F_OK, dir_fd=dfd)

    def read(self, held: HeldLock) -> TicketMark | None:
        """The mark of `held`'s path, or None when there is none."""
        try:
            fd = os.open(self._name(held.key), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=self._dir())
        except FileNotFoundError:
            return None
        try:
            raw = os.read(fd, _READ_MAX + 1)
        finally:
            os.close(fd)
        return _parse(raw)

    def write(self, held: HeldLock, lease_id: str, session: str, ends_at: float) -> None:
        """Mark `held`'s path as ticketed to `session` until `ends_at`."""
        body = json.dumps({"i": lease_id, "s": session_tag(session), "e": ends_at}, separators=(",", ":"))
        data = MAGIC + body.encode("ascii")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(self._name(held.key), flags, 0o600, dir_fd=self._dir())
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def clear(self, held: HeldLock, lease_id: str | None = None) -> bool:
        """Remove the mark of `held`'s path: any mark, or only lease `lease_id`'s. Whether one was removed."""
        if lease_id is not None:
            mark = self.read(held)
            if mark is None or mark.lease_id != lease_id:
                return False
        try:
            os.unlink(self._name(held.key), dir_fd=self._dir())
        except FileNotFoundError:
            return False
        return True


def _parse(raw: bytes) -> TicketMark:
    unreadable = TicketMark("", "", math.inf, raw)
    if len(raw) > _READ_MAX or not raw.startswith(MAGIC):
        return unreadable
    try:
        d = json.loads(raw[len(MAGIC) :])
        lease_id, holder, ends_at = d["i"], d["s"], d["e"]
    except (ValueError, KeyError, TypeError):
        return unreadable
    if not isinstance(lease_id, str) or not lease_id or not isinstance(holder, str):
        return unreadable
    if isinstance(ends_at, bool) or not isinstance(ends_at, int | float) or math.isnan(ends_at):
        return unreadable
    return TicketMark(lease_id, holder, float(ends_at), raw)
