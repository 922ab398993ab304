"""The lease gate of the check-then-write: the lease snapshot, the decision before the lock, the leases this
process granted, and the write tickets' marks. One object per Coordinator, owned by it; the write steps,
Session and the agent-write protocol call only its public methods.

Two ways a grant reaches the writers of every process, whose pre-lock decision may rest on a lease snapshot
up to `LEASE_SNAPSHOT_S` old (taken before the grant):
- a lease a session asks for (`fences=True`: `Session.lease`, patterns and globs, shared or exclusive) is
  granted, then the grant waits `LEASE_SNAPSHOT_S` before it returns: by then every snapshot taken before it
  has been dropped, and the holder may rely on the lease;
- an agent's write ticket (`fences=False`: one exclusive lease per path, agentwrites.py) is recorded as a
  mark beside each path's lock, under that lock (disk/tickets.py), and the grant returns at once. Every writer
  of a path looks at the mark under the same lock, after its pre-lock decision (`check_mark`): a writer that
  took the lock before the mark was written has finished its write before the grant returned (and the
  ticket's holder then judges its view against that write, under the lock); one that takes it after finds
  the mark, lets the lock go and asks Redis (`ticket_seen`), which refuses it `leased` while the ticket
  lives. A mark ends with its ticket (`release`, `break_lease`); a mark left behind (its process killed)
  names its end and is ignored and removed after it, and one whose lease Redis no longer holds is removed by
  the first writer that asked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.disk import fsio
from coordinator.disk.locks import HeldLock
from coordinator.disk.tickets import TicketMark, TicketMarks
from coordinator.engine.resources import Disk, StateAccess
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.leases import (
    Lease,
    LeaseCheck,
    LeaseStore,
    check_leases,
    is_glob,
    leased_error,
    normalize_pattern,
)

# How old a lease snapshot may be when this process's cached view spares the pre-lock round trip. A session's
# lease grant waits this long before returning, so every snapshot taken before it has been dropped by then (a
# write ticket's grant does not wait: its marks are seen under the lock, module docstring).
LEASE_SNAPSHOT_S = 0.2


class TicketSeen(Exception):
    """Raised under a path's lock by `LeaseGate.check_mark`: another session's write ticket is marked there
    (or a mark could not be read). The writer lets the lock go, asks `LeaseGate.ticket_seen`, and comes
    again. Internal to the engine: it never leaves the check-then-write."""

    def __init__(self, mark: TicketMark) -> None:
        super().__init__(mark.lease_id or "unreadable mark")
        self.mark = mark


class LeaseGate:
    """Which leases a write must respect, as this process knows them.

    Invariant: a snapshot is used only while it is at most `LEASE_SNAPSHOT_S` old and none of its leases
    has ended; every grant, renewal, release or break made here drops it. No process's writer can write over
    a lease its holder relies on: a session's lease grant returns only after `LEASE_SNAPSHOT_S`, and a write
    ticket is marked under each path's lock before its grant returns, where every writer looks for it
    (module docstring).
    """

    def __init__(self, store: LeaseStore, disk: Disk, access: StateAccess, marks: TicketMarks) -> None:
        self.store = store
        self._disk = disk
        self._access = access
        self._marks = marks
        # Whether a write ticket is marked on a held lock's path: one `access` call (every write asks it).
        self.marked: Callable[[HeldLock], bool] = marks.present
        self._snapshot: tuple[float, float, list[Lease]] | None = None  # (taken at, earliest end, leases)
        self._granted: dict[str, dict[str, Lease]] = {}  # leases this process granted, per session
        self._granted_lock = threading.Lock()

    def invalidate(self) -> None:
        """Drop the snapshot (a lease changed): the next write fetches the leases again."""
        self._snapshot = None

    def granted_any(self, session: str) -> bool:
        """Whether this process granted `session` a lease it still remembers."""
        return bool(self._granted.get(session))

    def fresh(self) -> list[Lease] | None:
        """The snapshot's leases while it may be used, else None."""
        snap = self._snapshot
        if snap is None:
            return None
        taken, earliest_end, leases = snap
        if time.monotonic() - taken > LEASE_SNAPSHOT_S or time.time() >= earliest_end:
            return None
        return leases

    def take(self, raw: Any, taken: float) -> list[Lease]:
        """Keep the leases of a `queue_live` reply as the snapshot. `taken`: monotonic time before the fetch
        was sent (the snapshot is at least that old)."""
        leases = self.store.live_from(raw)
        earliest = min((x.ends_at for x in leases), default=float("inf"))
        self._snapshot = (taken, earliest, leases)
        return leases

    def fetch(self) -> list[Lease]:
        """The live leases, from Redis (one round trip), kept as the snapshot."""
        taken = time.monotonic()
        replies = self._access.call(lambda: self._access.store.run_extra(self.store.queue_live))
        return self.take(replies[0], taken)

    def rider(self) -> tuple[Callable[[Any], None] | None, Callable[[Any], None]]:
        """A lease-snapshot refresh to ride a round trip made anyway (after a write, a read), once the
        snapshot is half-way to stale: in a steady stream of edits, the snapshot never goes stale and no
        edit waits for it. Returns (the command to queue or None, what to do with its reply)."""
        snap = self._snapshot
        if snap is not None and time.monotonic() - snap[0] < LEASE_SNAPSHOT_S / 2 and time.time() < snap[1]:
            return NOT_DUE
        sent: list[float] = []

        def queue(pipe: Any) -> None:
            sent.append(time.monotonic())
            self.store.queue_live(pipe)

        def apply(reply: Any) -> None:
            if sent and not isinstance(reply, Exception):
                self.take(reply, sent[0])

        return queue, apply

    def decide(self, session: str, rp: fsio.ResolvedPath, leases: list[Lease]) -> LeaseCheck:
        """Refuse a write that another session's exclusive lease covers; find the writer's own lease (the
        highest token covering P, which fences the write). A lease this process granted to S that is no
        longer live (ran out, released elsewhere, broken) is reported once, as `leased`."""
        check = check_leases(leases, session, rp.key) if leases else LeaseCheck(None, None)
        if check.conflict is not None:
            raise leased_error(check.conflict, rp.shown)
        with self._granted_lock:
            remembered = [x for x in self._granted.get(session, {}).values() if x.covers(rp.key)]
        if not remembered:
            return check
        live_ids = {x.id for x in leases}
        if any(x.id not in live_ids for x in remembered):
            leases = self.fetch()  # the snapshot may predate the grant: look once more
            live_ids = {x.id for x in leases}
            check = check_leases(leases, session, rp.key)
            if check.conflict is not None:
                raise leased_error(check.conflict, rp.shown)
        for lease in remembered:
            if lease.id not in live_ids:
                self.forget(session, lease.id)
                raise _ended_error(lease, rp)
        return check

    def fence(self, session: str, key: str, own: Lease) -> None:
        """Under the lock: refused if the writer's own lease ran out while it waited, or a later lease wrote
        here (the grant is then forgotten)."""
        try:
            self.store.enforce_fence(key, own)
        except CoordinatorError:
            self.forget(session, own.id)
            raise

    def forget(self, session: str, lease_id: str) -> None:
        with self._granted_lock:
            mine = self._granted.get(session)
            if mine is not None:
                mine.pop(lease_id, None)
                if not mine:
                    del self._granted[session]

    def grant(
        self, session: str, patterns: Sequence[str], mode: str, ttl_s: float, *, fences: bool = True
    ) -> list[Lease]:
        """Grant leases (module docstring). `fences=True`: a session's lease, returned after
        `LEASE_SNAPSHOT_S`; the session's own writes in this process carry it. `fences=False`: an agent's write
        ticket, exclusive leases of paths (not patterns): each path's mark is written under its lock and the
        grant returns at once (the agent writes, not this process, and the ticket may end in another
        process). A ticket whose marks cannot all be written is released again and refused (io_error)."""
        pats = [normalize_pattern(p, self._disk.root) for p in patterns]
        granted = self.store.grant(session, pats, mode, ttl_s)
        self._snapshot = None
        if not fences:
            self._mark(session, granted)
            return granted
        with self._granted_lock:
            mine = self._granted.setdefault(session, {})
            for old_id in [i for i, x in mine.items() if x.pattern in set(pats)]:
                del mine[old_id]
            mine.update({x.id: x for x in granted})
        # Every process's lease snapshot taken before the grant is dropped within LEASE_SNAPSHOT_S: only
        # then may the holder rely on the lease.
        time.sleep(LEASE_SNAPSHOT_S)
        return granted

    def _mark(self, session: str, granted: list[Lease]) -> None:
        """A write ticket's marks, one per path under its lock (tickets.py); all or none."""
        done: list[Lease] = []
        try:
            for lease in granted:
                with self._disk.locks.acquire(lease.pattern) as held:
                    self._marks.write(held, lease.id, session, lease.ends_at)
                done.append(lease)
        except (OSError, CoordinatorError) as exc:
            for lease in granted:
                with contextlib.suppress(CoordinatorError):
                    self.store.release(session, lease_id=lease.id)
            self._unmark(done)
            if isinstance(exc, CoordinatorError):
                raise
            raise CoordinatorError(
                ErrorCode.IO_ERROR,
                f"The write ticket for {granted[len(done)].pattern!r} could not be recorded in the state folder "
                f"({exc.strerror or exc}); nothing was granted. Check that the state folder is writable and the "
                "disk is not full, then try again.",
                path=granted[len(done)].pattern,
            ) from exc

    def _unmark(self, ended: Sequence[Lease]) -> None:
        """Remove the marks of leases that ended (only a ticket has one: an exclusive lease of one path). Best
        effort: a mark left behind is judged by Redis and removed by the first writer that finds it."""
        for lease in ended:
            if not lease.exclusive or is_glob(lease.pattern):
                continue
            try:
                with self._disk.locks.acquire(lease.pattern) as held:
                    self._marks.clear(held, lease.id)
            except (OSError, CoordinatorError):
                continue

    def check_mark(self, held: HeldLock, session: str, passed: frozenset[bytes] = frozenset()) -> None:
        """Under the path's lock, before `session` writes: raises `TicketSeen` when another session's write
        ticket is marked there, or a mark cannot be read. A mark of `session`'s own passes; one whose end has
        passed, or one in `passed` (Redis was asked after it was seen, and holds no such lease), is removed.
        One `access` call when there is no mark."""
        if not self._marks.present(held):
            return
        try:
            mark = self._marks.read(held)
            if mark is None or mark.held_by(session):
                return
            if mark.raw in passed or mark.ends_at <= time.time():
                self._marks.clear(held)
                return
        except OSError as exc:
            raise CoordinatorError(
                ErrorCode.IO_ERROR,
                f"The write-ticket mark of {held.key!r} in the state folder could not be read or removed "
                f"({exc.strerror or exc}); nothing was written. Check the state folder's permissions and free "
                "space, then try again.",
                path=held.key,
            ) from exc
        raise TicketSeen(mark)

    def ticket_seen(self, session: str, rp: fsio.ResolvedPath, seen: TicketSeen) -> LeaseCheck:
        """After the lock, once `check_mark` raised: the leases from Redis (one round trip). Refused `leased`
        while the marked ticket lives (or, for an unreadable mark, while any other session's exclusive lease
        covers the path); else the writer's new lease check, and it may come again with the mark in
        `passed`."""
        leases = self.fetch()
        check = self.decide(session, rp, leases)
        holder = next((x for x in leases if x.id == seen.mark.lease_id), None)
        if holder is not None and holder.session != session:
            raise leased_error(holder, rp.shown)
        return check

    def renew(self, session: str, lease_id: str | None, ttl_s: float) -> list[Lease]:
        ids = [lease_id] if lease_id else [x.id for x in self.store.live() if x.session == session]
        out = [self.store.renew(session, i, ttl_s) for i in ids]
        with self._granted_lock:
            mine = self._granted.get(session, {})
            for x in out:
                if x.id in mine:
                    mine[x.id] = x
        self._snapshot = None
        self._remark(session, out)
        return out

    def _remark(self, session: str, renewed: Sequence[Lease]) -> None:
        """A renewed write ticket's mark names its new end (a lease without a mark gets none). Best effort: a
        mark whose end passed while its lease lives is only what a writer's pre-lock decision already sees
        (its snapshot is younger than the lease's first end), never a write through the ticket."""
        for lease in renewed:
            if not lease.exclusive or is_glob(lease.pattern):
                continue
            try:
                with self._disk.locks.acquire(lease.pattern) as held:
                    mark = self._marks.read(held)
                    if mark is not None and mark.lease_id == lease.id:
                        self._marks.write(held, lease.id, session, lease.ends_at)
            except (OSError, CoordinatorError):
                continue

    def release(self, session: str, lease_id: str | None, pattern: str | None) -> int:
        pat = normalize_pattern(pattern, self._disk.root) if pattern is not None else None
        ended = self.store.release_leases(session, lease_id=lease_id, pattern=pat)
        with self._granted_lock:
            mine = self._granted.get(session, {})
            for i in [i for i, x in mine.items() if lease_id in (None, i) and pat in (None, x.pattern)]:
                del mine[i]
        self._snapshot = None
        self._unmark(ended)
        return len(ended)

    def break_lease(self, lease_id: str | None, session: str | None) -> list[Lease]:
        ended = self.store.break_lease(lease_id=lease_id, session=session)
        self._snapshot = None
        self._unmark(ended)
        return ended


def _ended_error(lease: Lease, rp: fsio.ResolvedPath) -> CoordinatorError:
    when = time.strftime("%H:%M:%S", time.localtime(lease.ends_at))
    return CoordinatorError(
        ErrorCode.LEASED,
        f"Your {lease.mode} lease on {lease.pattern!r} (token {lease.token}) has ended: it ran out at "
        f"{when}, or was released or broken. Nothing was written to {rp.shown}. Lease it again and "
        "read the file again before changing it (another session may have changed it); or, if you "
        "no longer need the lease, just make the change again.",
        path=rp.key,
        lease_id=lease.id,
        token=lease.token,
    )


def _ignore(reply: Any) -> None:
    return None


#: `LeaseGate.rider`'s answer when no refresh is due: no command, a reply handler that does nothing.
NOT_DUE: tuple[Callable[[Any], None] | None, Callable[[Any], None]] = (None, _ignore)
