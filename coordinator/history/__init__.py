"""History: every version of every path, kept by content, with a per-path index. The one owner of its format.

Nothing else reads or writes these files: the engine, `gc` (retention.py) and the commands ask this module
(typed `HistoryEntry` values, newest-first tail reads, whole-index scans, object loads, the rewrite for gc).

Layout under the state folder (per path, files named by the XXH3-128 hash of the path key):
    history/index/<path hash>.jsonl       one JSON line per write: version, time, session, operation, the
                                          content hashes before and after, and where each content is stored
                                          (`before_at` / `after_at`: [offset, length] in the path's pack).
                                          A first line {"format": 2, "pack": G} names the pack generation G
                                          (absent: 0); gc writes it when it compacts.
    history/packs/<path hash>.<G>.pack    the path's contents, appended: a 28-byte header (b"ECO1", the
                                          16-byte digest, the length) and the bytes.
    history/objects/<h[:2]>/<h>           contents stored by earlier versions (one file per content); still
                                          read, and moved into packs by `gc`.
    locks/<path hash>.lock                the path's lock file (locks.py) carries this module's 56-byte head
                                          record: the last version number given, the last version known to
                                          have reached the file, that version's content hash and location,
                                          and the pack generation.

Invariants, each enforced here:
1. Every write is undoable, and its pre-image is an object no other program holds: the engine hands over the
   bytes it read under the lock, and they are appended to the path's pack (a file only this module opens),
   never linked from the data file's inode. Loads verify the content hash.
2. A write costs appends to open files: the new content and the index line, each one `write` to a
   descriptor kept open per path. The pre-image usually costs nothing: it is the previous write's result,
   whose location the head record holds. A content is stored again only after an outside change.
3. Entry first: the index line (and the contents) are written before the data file is replaced, so a
   crash right after the replace leaves the write undoable. `commit` then marks the version as applied in
   the head record (a pwrite to the lock file, no fsync). The next write of the path (`begin`) and `gc`
   reconcile an unmarked newest entry against the bytes actually on disk: if the file does not hold that
   entry's result, the replace never happened (a crash in between) and the entry is taken back, so the
   history lists only versions that reached the file. Version numbers skip it (never reused).
4. All writes of a path's index, pack and head happen under the path's lock; a torn tail (crash mid-append)
   is never read as an entry and never swallows the next one.
5. gc replaces a pack and its index only under the path's lock: the new pack under a new generation, then
   the index naming it (an atomic replace), then the old pack is removed. The head's generation is bumped
   first, so a writer in another process reopens its cached descriptors before its next append.
"""

from coordinator.history._format import (
    FORMAT,
    HeadRecord,
    HistoryEntry,
    IndexFile,
    Loc,
    LockFile,
    PendingWrite,
    TailRead,
    content_hash,
)
from coordinator.history._store import History

__all__ = [
    "FORMAT",
    "HeadRecord",
    "History",
    "HistoryEntry",
    "IndexFile",
    "Loc",
    "LockFile",
    "PendingWrite",
    "TailRead",
    "content_hash",
]
