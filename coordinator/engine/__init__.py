"""Coordinator and Session: the one code path through which every read and write passes.

The check-then-write, for `edit` / `multi_edit` / `write` / `undo` by session S on path P (write.py, in
named steps):
1. Before the lock (`CheckThenWrite._pre_lock`): validate arguments (arguments.py), resolve P inside the root, know S's
   view of P and the leases. The view comes from this process's cache when it holds one (state_check
   "cached", the default: no round trip), else from Redis, failing closed (`state_unavailable`) when Redis
   cannot be reached. Leases come from a snapshot at most `LEASE_SNAPSHOT_S` old (refreshed on the round
   trips that reads and writes make anyway), else are fetched on the same round trip as the view.
2. Take the OS lock for P (a lock file under the state folder). A caller that must not wait (an event
   loop) gets `LockBusy` instead, whose `resume()` continues this same call (calls.py).
3. Under the lock, synchronously and with no network I/O: read the file bytes; hash them; compare with S's
   view; decode, match, replace, encode; record the pre-image and the index entry in history; write a
   temporary file and rename it over P.
4. After the lock (record.py): record S's new view, P's version and the change event in Redis, in one
   round trip with the notices and a lease refresh when due.

Staleness rule: S's view is current iff the hash of the file now equals the hash S recorded at its last
read or write of P. mtime and size are recorded and reported but never decide: a touched file with the
same bytes is not stale, and a rewrite within the same mtime tick is.

If step 4 fails, the write stands (it is reported, with a warning, never as a failure) and S's next edit
is looked up again: the safe direction.

Policy `rebase` (per coordinator or per session; `strict` is the default): when the file changed since S's
view, an edit is not refused outright. Under the lock, the content S last saw (this process's text cache,
else the history's content store) is loaded from local disk, and `rebase.rebase_edits` carries the edit
over onto the current text if no intervening change overlaps or touches it. S's read state then becomes
its *view* (what it saw plus its own edit), never the current file: changes it has not seen stay unseen,
and its next edit near them is checked again. Who made the intervening changes is looked up in the history
index after the lock is released (intervening.py).

Leases (leases.py): a session's lease grant waits `LEASE_SNAPSHOT_S` before it returns, so no process's
snapshot can miss it; an agent's write ticket returns at once, its mark written beside the path's lock, where
every writer looks under that lock after its pre-lock decision (leasing.py, disk/tickets.py). A write
under the writer's own lease is fenced under the lock against a local fence file. Every write publishes a
change event (events.py) on the post-write round trip, where notices about other files the session read
also ride.

The engine is a few collaborating objects, each in its module, made by the `Coordinator` (coordinator.py),
which owns the resources they share (descriptors, locks, history, Redis, caches): `CheckThenWrite`
(write.py: the common path, straight through, handing every other call to the general path before
anything is written, and the general path), the `LeaseGate` (leasing.py), the `Rebaser` (rebasing.py), the
`Recorder` (record.py: after the lock), `InterveningWrites` (intervening.py) and the `Reader`
(reading.py). A `Session` (session.py) calls only their public methods; its `CallOptions` (calls.py) travel
with it (`Coordinator.session(..., options=)`, `Session.with_options`). Other modules: results
(ReadResult, WriteResult), plan (CurrentFile, WritePlan: the public types of `Coordinator.check_then_write`;
the staleness rule), caches, steps (what a call carries between the steps).
"""

from coordinator.engine.calls import CallOptions, LockBusy
from coordinator.engine.coordinator import Coordinator
from coordinator.engine.plan import CurrentFile, Edits, WritePlan
from coordinator.engine.results import EditResult, ReadResult, WriteResult
from coordinator.engine.session import Session
from coordinator.engine.steps import CheckedWrite

__all__ = [
    "CallOptions",
    "CheckedWrite",
    "Coordinator",
    "CurrentFile",
    "EditResult",
    "Edits",
    "LockBusy",
    "ReadResult",
    "Session",
    "WritePlan",
    "WriteResult",
]
