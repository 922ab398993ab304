"""The agents' open write calls, journaled on disk beside Redis: what the agent-write protocol
(engine/agentwrites.py) needs at a call's after-hook when Redis lost its state between the call's before-hook
and its write (a FLUSHALL, a restarted embedded Redis, a failover that lost the last writes).

    <state dir>/calls/<xxh3 of the path>.<xxh3 of session NUL call>.call    `MAGIC`, then the call's JSON
                                                                          (state/agentcalls.py's PendingCall)

Redis stays the table every process reads first; a journal entry is written at the call's before-hook, after
its Redis entry (the caller's text carries the generation of Redis's state it was written in), and removed
when its call ends, after its Redis entry. One of an earlier generation whose Redis entry is gone is a call
whose memory Redis lost: its write is still judged against the view it was allowed to change (invariant 7: a
late write over an acknowledged version is repaired or restored and told, never recorded as a plain
overwrite). Entries carry
their own end and are swept when listed after it. Best effort: a disk error loses only this second copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import xxhash

__all__ = ["MAGIC", "CallJournal"]

MAGIC = b"edit-coordinator agent call 1\n"
_SUFFIX = ".call"
_READ_MAX = 64 * 1024


def _hash(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogateescape"))


class CallJournal:
    """The journal folder of one state folder (module docstring). Values are the callers' JSON texts."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, key: str, session: str, call: str) -> Path:
        return self.folder / f"{_hash(key)}.{_hash(session + chr(0) + call)}{_SUFFIX}"

    def put(self, key: str, session: str, call: str, text: str) -> None:
        """Journal one call (replacing the entry of the same path, session and call)."""
        path = self._path(key, session, call)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(MAGIC + text.encode("utf-8", "surrogateescape"))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def remove(self, key: str, session: str, call: str) -> bool:
        """Remove one entry; True when this process removed it (only one settles a call)."""
        try:
            self._path(key, session, call).unlink()
        except OSError:
            return False
        return True

    def entries(self, key: str | None = None) -> list[str]:
        """The journaled calls' texts (of the path `key` only, when given)."""
        prefix = f"{_hash(key)}." if key is not None else ""
        try:
            names = [n for n in os.listdir(self.folder) if n.endswith(_SUFFIX) and n.startswith(prefix)]
        except OSError:
            return []
        out = []
        for name in names:
            try:
                with open(self.folder / name, "rb") as f:
                    raw = f.read(_READ_MAX)
            except OSError:
                continue
            if raw.startswith(MAGIC):
                out.append(raw[len(MAGIC) :].decode("utf-8", "surrogateescape"))
        return out
