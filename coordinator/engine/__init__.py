"""Coordinator and Session: the one code path through which every read and write passes.

The check-then-write, for `edit` / `multi_edit` / `write` / `undo` by session S on path P:
1. Outside the lock: validate arguments, resolve P inside the root, fetch S's read state for P from Redis
   (this round trip also proves Redis is up: if it is not, the call fails closed before anything is touched).
2. Take the OS lock for P (a lock file under the state folder).
3. Inside the lock, synchronously and with no network I/O: read the file bytes; hash them; compare with S's
   recorded hash; decode, match, replace, encode; keep the pre-image in history; write a temporary file and
   rename it over P; append the history index.
4. Release the lock; then record S's new read state and P's new version in Redis.

Staleness rule: S's view is current iff the hash of the file now equals the hash S recorded at its last
read or write of P. mtime and size are recorded and reported but never decide: a touched file with the
same bytes is not stale, and a rewrite within the same mtime tick is.

If step 4 fails, the write stands and S's next edit is refused (its recorded hash is the old one): the safe
direction.

Policy `rebase` (per coordinator or per session; `strict` is the default): when the file changed since S's
view, an edit is not refused outright. Under the lock, the content S last saw (kept in the history's
content-addressed store: a read stores it unless it is there already, a write's pre-image is the next
writer's hard link) is loaded from local disk, and `rebase.rebase_edits` carries the edit over onto the
current text if no intervening change overlaps or touches it. S's read state then becomes its *view*
(what it saw plus its own edit), never the current file: changes it has not seen stay unseen, and its next
edit near them is checked again. Who made the intervening changes is looked up in the history index after
the lock is released.

Leases (leases.py) are checked before the lock, on the read-state round trip (or, when this process's
cached view saves that round trip, against a lease snapshot at most `LEASE_SNAPSHOT_S` old; a grant waits
that long before it returns, so no process can miss it). A write under the writer's own lease is fenced
under the lock against a local fence file. Every write publishes a change event (events.py) on the
post-write pipeline, where notices about other files the session read also ride.
"""

from ..arguments import POLICIES
from ..arguments import check_policy as _check_policy
from ..arguments import check_session_id as _check_session_id
from ..arguments import check_text as _check_text
from ..arguments import opt_int as _opt_int
from .caches import _RefusalCounts, _TextCache, _ViewCache
from .calls import CallOptions, LockBusy, PostWriteHook
from .coordinator import Coordinator
from .intervening import _Intervening, _Walk
from .leasing import LEASE_SNAPSHOT_S
from .options import Durability, KiB, MiB, Policy, StateCheck
from .plan import CurrentFile, WritePlan, _CachedViewRefused, _changed_lines, _check_view, _Current, _Missing, _Plan
from .results import EditResult, ReadResult, WriteResult
from .session import Session

__all__ = [
    "LEASE_SNAPSHOT_S",
    "POLICIES",
    "CallOptions",
    "Coordinator",
    "CurrentFile",
    "Durability",
    "EditResult",
    "KiB",
    "LockBusy",
    "MiB",
    "Policy",
    "PostWriteHook",
    "ReadResult",
    "Session",
    "StateCheck",
    "WritePlan",
    "WriteResult",
    "_CachedViewRefused",
    "_Current",
    "_Intervening",
    "_Missing",
    "_Plan",
    "_RefusalCounts",
    "_TextCache",
    "_ViewCache",
    "_Walk",
    "_changed_lines",
    "_check_policy",
    "_check_session_id",
    "_check_text",
    "_check_view",
    "_opt_int",
]
