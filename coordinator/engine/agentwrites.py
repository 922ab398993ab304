"""The agent-write protocol: the one owner of the steps around a write an agent's own tool makes between two
of its hook events (h11's "one state machine, I/O apart"). The hook adapters (coordinator/agents/) only
turn payloads into these calls and the answers into the agents' hook answers; the disk and history steps are
`NativeWrites`' (native.py); the ticket is a lease granted by the lease gate (leasing.py); the memory of a
call between its hooks is the state layer's `AgentCallStore` (state/agentcalls.py).

A call's life:
- before: refuse a stale or unread file without waiting (`judge_write`); take the write ticket, an exclusive
  lease of the path, through `LeaseGate.grant(fences=False)`, which marks the ticket beside the path's lock
  under that lock and returns at once: no writer of any process can miss a granted ticket (every writer
  looks for the mark under the lock it writes under, so one whose lease snapshot predates the grant either
  wrote before the mark, or finds it and is refused `leased` by Redis). Then, under the path's lock, judge
  the view again (against any write made before the mark) and keep the pre-image (`prepare_write`), and
  remember the call (`AgentCallStore.put`). A refusal leaves no ticket behind.
- after: record what the write left on disk (`record_found`) and release the ticket. A failed call records
  nothing, unless the file did change (then it is recorded all the same: what is on disk is the truth).
- reconcile: a ticket ends with its call. An open call is settled (recorded if the file changed, else
  released) at the session's next hook event, at its Stop/SessionEnd, when a change of the path is seen,
  and when another session waits for the path: if the holder's write has landed it is recorded; if the
  file is unchanged `HOLDER_GRACE_S` after the grant, the holder's call is taken to be over (a denied or
  still-open permission prompt, a failed apply_patch, a killed agent) and its ticket lapses. The ticket's
  fixed life (`TICKET_TTL_S`) is only for an agent that died mid-write with nobody waiting.
- late writes (invariant 7 (c)): a lapsed call is remembered (`LAPSED_LIFE_S`); when its write lands after
  all (the permission prompt answered after minutes), or any write overwrites a version its writer had not
  seen, the overwritten change is put back by the rebase rule or the acknowledged version restored
  (`NativeWrites.record_found`), and both sessions are told: the late writer in its hook answer, the
  overwritten session by a notice given with its next hook answer.
- Redis losing the calls (a flush, an embedded Redis restarted empty): each open call is also journaled on
  disk (`CallJournal`); one found only there is taken as lapsed, and its write judged as a late write.

The permission-prompt case, decided: a call waiting on an interactive permission prompt does not hold the
path. Another session that needs it waits at most `HOLDER_GRACE_S` (1 s) after the holder's grant, then
writes; if the prompt is then allowed, the late write is repaired as above and said to both. Holding the
others for the prompt's minutes would stall a fleet on one person's answer; losing the write is never an
option.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from coordinator.engine.native import Carried, Found, NativeWrite, NativeWrites
from coordinator.engine.observer import refusal_outcome
from coordinator.engine.write import OUTSIDE_WRITER
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.agentcalls import LAPSED_LIFE_S, AgentCallStore, PendingCall
from coordinator.state.connection import redis_call
from coordinator.state.refusals import FileRefusals
from coordinator.state.views import KIND_READ, ReadState
from coordinator.text.rebase import describe_changes
from coordinator.text.semantics import EditSpec

if TYPE_CHECKING:
    from coordinator.disk.calljournal import CallJournal
    from coordinator.engine.leasing import LeaseGate

__all__ = ["OUTSIDE", "REPAIRED", "RESTORED", "AgentWrites", "Allowed", "Settled"]

# The outcomes counted for a late write (beside the refusals' codes): its overwritten change carried back,
# or the overwritten version restored.
REPAIRED = "late_write_repaired"
RESTORED = "late_write_restored"
# The author of a change no session's call accounts for (the engine's stale message knows it too).
OUTSIDE = OUTSIDE_WRITER

TICKET_TTL_ENV = "EDIT_COORDINATOR_TICKET_TTL_S"
# A shell call running (no path: `PendingCall.key`): a change no call's ticket accounts for, seen while
# exactly one session's shell call runs, is that session's (attribution by the call running at that moment).
# It ends with the call's after-hook or the session's next event, at the latest after RUNNING_S.
RUNNING = ""
RUNNING_S = 600.0
TICKET_WAIT_ENV = "EDIT_COORDINATOR_TICKET_WAIT_S"


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


# A write ticket's life: an agent killed between its hooks holds the path this long ($EDIT_COORDINATOR_TICKET_TTL_S).
TICKET_TTL_S = _seconds(TICKET_TTL_ENV, 30.0)
# How long a hooked write waits for another session's lease before it is refused ($EDIT_COORDINATOR_TICKET_WAIT_S).
TICKET_WAIT_S = _seconds(TICKET_WAIT_ENV, 5.0)
# How long after its grant a ticket whose file is unchanged holds off another session that waits for it.
HOLDER_GRACE_S = 1.0
_TICKET_POLL_S = 0.01


@dataclass(frozen=True)
class Settled:
    """What one step found to tell: `notes` for the calling session's model (its late write repaired,
    notices left for it), in the order they happened."""

    notes: tuple[str, ...] = ()

    def text(self) -> str:
        return "\n\n".join(self.notes)


@dataclass(frozen=True)
class Allowed:
    """`before_write`'s answer: the agent's write may go on. `content`: the content its tool is to write
    instead of its own (a whole write made on an older view, merged: the hook answer rewrites the tool's
    input); `note`: what the model is told (its write was carried over changes it had not seen)."""

    content: str | None = None
    note: str = ""


class AgentWrites:
    """The protocol around agents' own writes (module docstring). Built by the Coordinator
    (`Coordinator.agent_writes`) from the parts it owns."""

    def __init__(
        self, native: NativeWrites, gate: LeaseGate, calls: AgentCallStore, journal: CallJournal | None = None
    ) -> None:
        self.native = native
        self.gate = gate
        self.calls = calls
        self.journal = journal  # the open calls' copy on disk, for when Redis loses them (disk/calljournal.py)

    # -- the steps ----------------------------------------------------------------------------------------
    def before_write(
        self,
        session: str,
        call: str,
        path: str,
        *,
        whole: bool,
        operation: str,
        policy: str = "strict",
        edits: tuple[EditSpec, ...] = (),
        content: str | None = None,
    ) -> Allowed:
        """Before an agent's own write of `path`: raises the refusal (not_read, stale, leased, ...), else
        the session holds the path's write ticket and the pre-image is kept. A refusal is counted.

        `policy` "rebase" (the session's policy, chosen by the hook adapter): a write made on an older view is
        carried over instead of refused `stale` when its change commutes with the changes since
        (`NativeWrites.prepare_carried`). `edits`: the agent's Edit, allowed as it is when its tool, replacing
        the old text in the file as it is now, lands as the rebase would. `content`: a whole write's content,
        given only where the agent's hook answer can rewrite the tool's input: merged 3-way, and the merge
        returned (`Allowed.content`) for the agent to write instead. Without them the refusal stays."""
        with self._counting(session, path, operation):
            return self._before_write(
                session, call, path, whole=whole, operation=operation, policy=policy, edits=edits, content=content
            )

    def _before_write(
        self,
        session: str,
        call: str,
        path: str,
        *,
        whole: bool,
        operation: str,
        policy: str,
        edits: tuple[EditSpec, ...],
        content: str | None,
    ) -> Allowed:
        judged = self.native.judge_write(session, path, whole=whole)
        view = judged.view
        # a whole write needs a whole view: one made on a partial view is never merged
        mergeable = content is not None and view is not None and not _partial(view)
        carry = policy == "rebase" and view is not None and (bool(edits) or mergeable)
        if judged.refusal is not None and not (carry and judged.refusal.code == ErrorCode.STALE):
            raise judged.refusal
        ticket = self._take_ticket(session, judged.key)
        try:
            if carry and view is not None:
                carried = self.native.prepare_carried(session, path, view, whole=whole, edits=edits, content=content)
            else:
                carried = Carried(self.native.prepare_write(session, path, whole=whole, view=view))
            prepared = carried.prepared
            now = time.time()
            ends = now + TICKET_TTL_S
            window = (view.offset, view.limit) if view is not None and _partial(view) else None
            entry = PendingCall(
                session, call, prepared.key, ticket, prepared.before, operation, now, ends, window=window
            )
            self._remember(entry)
        except BaseException:
            self.gate.release(session, ticket, None)
            raise
        writers = self.native.writers_since(prepared.key, view.hash) if carried.changes and view is not None else []
        return _allowed(carried, operation, writers)

    def after_write(self, session: str, call: str, *, succeeded: bool) -> Settled:
        """After an agent's own write call (`succeeded`: its tool said so): what the file holds now is
        recorded as the session's write, and its ticket released. A lapsed call's late write is repaired."""
        entry = self.calls.get(session, call)
        if entry is not None:
            # Recorded while the call is still listed, then taken: the tree watcher, looking at the same change
            # meanwhile, finds the call and leaves the change to it; taken first, the change was the watcher's
            # to record, as outside's, and the session's next Edit was refused as stale.
            notes = self._settle(entry, taken=True)
            self.calls.take(session, call)
            self._forget(entry)
            return Settled(notes)
        # Redis lost the call's memory (a flush, a restart): its copy on disk judges its write all the same
        entry = next((x for x in self._lost(session=session) if x.call == call and self._forget(x)), None)
        if entry is None:
            return Settled()  # no ticket was taken (refused before), or another step settled it
        return Settled(self._settle(entry, taken=True))

    def before_shell(self, session: str, call: str, command: str, cwd: str | None) -> None:
        """Before an agent's shell command: the files it names as files it writes (`text.shellfiles`). A
        whole-file overwrite of an existing file whose current content the session has not seen is refused
        as a Write would be; every named target then gets a write ticket (one grant for all) and its
        pre-image kept, as an Edit's. What the parser cannot see (a script's writes) the tree watcher does."""
        with self._counting(session, "", "shell"):
            self._before_shell(session, call, command, cwd)

    def _before_shell(self, session: str, call: str, command: str, cwd: str | None) -> None:
        from coordinator.text.shellfiles import printed_lines, write_targets

        targets: dict[str, tuple[str, bool]] = {}  # key -> (the command's name, its view judged)
        for target in write_targets(command):
            key = self.native.key_in_root(os.path.join(cwd or self.native.disk.root, target.path))
            if key is None or key in targets or (target.how == "script" and not self._is_file(key)):
                continue
            if target.how in ("whole", "script"):
                judged = self.native.judge_write(session, key, whole=True)
                # A script's file: it may only read it, so one never read is let through (ticket and
                # pre-image, as `sed -i`); one seen in a version since overwritten is refused: a script
                # written from what the model saw would put that back over the newer one, and a rewrite
                # with the same bytes cannot be told apart afterwards.
                if judged.refusal is not None and (target.how == "whole" or judged.view is not None):
                    raise judged.refusal
            # judged (again under the ticket): a whole overwrite's view, a script's file the session has seen
            targets[key] = (
                target.command,
                target.how == "whole" or (target.how == "script" and judged.view is not None),
            )
        if not printed_lines(command):  # it may write where the parser sees no target: the watcher asks
            now = time.time()
            self.calls.put(PendingCall(session, f"{call}#run", RUNNING, None, None, "shell", now, now + RUNNING_S))
        if not targets:
            return
        tickets = self._take_tickets(session, list(targets))
        now = time.time()
        try:
            for i, (key, (name, whole)) in enumerate(targets.items()):
                # Under the ticket and the path's lock: a judged target's view judged again (another
                # session may have written while this one waited for the ticket), the pre-image kept.
                before = self.native.prepare_write(session, key, whole=True).before if whole else None
                if not whole:
                    before = self.native.keep_pre_image(key)
                self._remember(
                    PendingCall(session, f"{call}#{i}", key, tickets[i], before, "shell", now, now + TICKET_TTL_S,
                                command=name)
                )  # fmt: skip
        except BaseException:
            for ticket in tickets:
                self.gate.release(session, ticket, None)
            raise

    def after_shell(self, session: str, call: str, command: str, cwd: str | None, printed: str | None) -> Settled:
        """After an agent's shell command: its targets' changes recorded as the session's writes (a named
        target it left unchanged is said: "your sed matched nothing"), and a file it printed whole (`cat f`)
        recorded as the session's view from what it printed (text.shellfiles.printed_lines: which commands)."""
        from coordinator.text.shellfiles import printed_lines

        notes: list[str] = []
        kept = [x for x in self.calls.of_session(session) if x.call.startswith(f"{call}#")]
        lost = self._lost(session=session, known=kept)  # Redis lost their memory: their copies on disk
        # Recorded while still listed, then taken (after_write's rule: the watcher finds the call meanwhile).
        ours = [x for x in kept if x.key != RUNNING]
        claimed = [x for x in lost if x.call.startswith(f"{call}#") and self._forget(x)]  # one process each
        for entry in ours + claimed:
            untouched = not entry.changed and self.native.unchanged(entry.key, entry.before)
            notes.extend(self._settle(entry, taken=True))
            if untouched and entry.command not in ("rm", "mv") and not _PYTHON.match(entry.command):
                notes.append(
                    f"Your command left {entry.key} unchanged: its {entry.command or 'command'} changed nothing "
                    f"there (a sed or perl pattern that matched nothing?). Read {entry.key} again and check."
                )
        for entry in kept:
            self.calls.take(entry.session, entry.call)
        for entry in ours:
            self._forget(entry)
        shown = printed_lines(command)
        if shown is not None and printed is not None:
            key = self.native.key_in_root(os.path.join(cwd or self.native.disk.root, shown.path))
            text = shown.text(printed)
            if key is not None:  # a window past the file's end is what the file has: `record_view` checks it
                count = _shown_count(text, shown.count)
                self.native.record_view(session, key, text, shown.first, count, from_end=shown.from_end)
        return Settled(tuple(notes))

    def after_read(self, session: str, path: str, shown: str, start_line: int, num_lines: int | None) -> None:
        self.native.record_view(session, path, shown, start_line, num_lines)

    def settle_session(self, session: str, *, but: str = "", end: bool = False) -> Settled:
        """At a hook event of `session`: its open calls other than `but` are over (a session's write calls
        run one at a time), so each is settled; then the notices left for it. `end`: the session stops."""
        notes: list[str] = []
        calls, notices = self.calls.at_event(session)
        for entry in self._lost(session=session, known=calls):
            if (entry.call == but or entry.call.startswith(f"{but}#")) or not self._forget(entry):
                continue
            notes.extend(self._settle(entry, taken=True))
        for entry in calls:
            if entry.call == but or entry.call.startswith(f"{but}#") or (entry.state == "lapsed" and not end):
                continue
            if entry.key == RUNNING:  # its shell call is over: no longer the one running
                self.calls.remove(entry)
                continue
            notes.extend(self._settle(entry, taken=False))
        return Settled((*notes, *notices))

    def keep_notes(self, session: str, settled: Settled) -> None:
        """Notes that `session`'s answer to this event cannot show its model (its agent adds no context
        there): kept as notices for its next hook answer, so that no note of invariant 7 is dropped."""
        for note in settled.notes:
            self.calls.tell(session, note)

    def observed(self, key: str, created: bool = False) -> None:
        """A change of `key` was seen (the tree watcher, engine/watcher.py): recorded as the write of the
        session whose call accounts for it, else as `OUTSIDE`'s. An open call's write is recorded and the call
        stays open (its tool may not be done; its after-hook ends it); a lapsed call's late write is settled
        (repaired, told). `created`: the watcher saw the path created (a file with no version yet is then
        recorded as a creation). A change recorded as a call's is not looked at again as another's here: a
        tool still writing (a shell's `cat > f` truncates, then writes) changes the file again after it
        was recorded, and that change is the call's, seen by the watcher's next event or the call's end."""
        accounted = False
        kept = self.calls.on_path(key)
        for entry in self._lost(key=key, known=kept):
            if self.native.unchanged(key, entry.before) or not self._forget(entry):
                continue
            accounted = True
            for note in self._settle(entry, taken=True):
                self.calls.tell(entry.session, note)
        for entry in kept:
            if self.native.unchanged(key, entry.before) or _wrote_already(entry):
                continue  # nothing new; or a one-write tool's second change: not its (recorded as outside)
            accounted = True
            if self._emptied(key):  # a write in two steps half-way (truncated, not yet written), of an open
                continue  # call or a lapsed one's late write: its next change is seen
            if entry.state == "lapsed":
                for note in self._settle(entry, taken=False):
                    self.calls.tell(entry.session, note)
                continue
            found = self._record(entry, writing=True)
            if found.entry is not None and self.calls.remove(entry):
                self._remember(replace(entry, before=found.entry.after, changed=True))
            for note in self._told(entry, found):
                self.calls.tell(entry.session, note)
        if not accounted:
            self._unaccounted(key, created)

    def _unaccounted(self, key: str, created: bool) -> None:
        """A change no call's ticket accounts for: the write of the one session whose shell call is running
        now (a script's write, a name the parser could not see), else `OUTSIDE`'s. While shell calls of
        several sessions run it cannot be told whose it is: outside. The running session's write is judged
        from its view of the file, as a late write is (invariant 7 (c)): written over a newer version it had
        not seen (a script writing what it computed from an earlier read), the overwritten change is put back
        or restored, and both sessions are told."""
        running = {x.session for x in self.calls.all() if x.key == RUNNING}
        if len(running) != 1:
            self.native.record_outside(key, OUTSIDE, created=created)
            return
        session = running.pop()
        view = self.native.view_of(session, key)
        if view is not None:
            now = time.time()
            unnamed = PendingCall(session, "", key, None, view.hash, "shell", now, now)
            found = self._record(unnamed)
            if found.entry is not None:
                for note in self._told(unnamed, found):
                    self.calls.tell(session, note)
                return
        self.native.record_outside(key, session, created=created, operation="shell")

    # -- the memory of calls: Redis, and its copy on disk ----------------------------------------------------
    def _remember(self, entry: PendingCall) -> None:
        self.calls.put(entry)
        if self.journal is not None:  # with the generation of Redis's state it was kept in
            epoch = self._epoch()
            self.journal.put(entry.key, entry.session, entry.call, f"{epoch}\n{entry.to_json()}")

    def _epoch(self) -> str:
        state = self.native.access.store
        return redis_call(lambda: state.epoch().id)

    def _forget(self, entry: PendingCall) -> bool:
        """End `entry`'s copy on disk; True when this process removed it."""
        return self.journal is not None and self.journal.remove(entry.key, entry.session, entry.call)

    def _lost(
        self, *, session: str | None = None, key: str | None = None, known: list[PendingCall] | None = None
    ) -> list[PendingCall]:
        """The journaled calls (of `session`, or on `key`) that Redis lost: kept in an earlier generation of
        its state (`StateStore.epoch`: a flush, a restart empty) and not held now (`known`: the ones it holds,
        when already asked). A copy of the current generation that Redis does not hold is a call another
        process is ending (Redis first, then the copy): not lost. Each lost one is returned lapsed (its
        ticket went with Redis); its write is judged against the view it was allowed to change, as a late
        write's is. Copies past a lapsed call's life are swept."""
        if self.journal is None:
            return []
        texts = self.journal.entries(key)
        if not texts:
            return []
        if known is None:
            known = self.calls.all()
        held = {x.field() for x in known}
        now = time.time()
        current: str | None = None
        out: list[PendingCall] = []
        for text in texts:
            epoch, _, raw = text.partition("\n")
            entry = PendingCall.from_json(raw)
            if entry is None or (session is not None and entry.session != session) or entry.field() in held:
                continue
            if entry.started + LAPSED_LIFE_S < now:
                self._forget(entry)
                continue
            current = current if current is not None else self._epoch()
            if epoch != current:
                out.append(replace(entry, ticket=None, state="lapsed", ends=now + LAPSED_LIFE_S))
        return out

    # -- counts -------------------------------------------------------------------------------------------
    @contextmanager
    def _counting(self, session: str, path: str, operation: str) -> Iterator[None]:
        """A refusal of the protocol's is counted as the engine's are (point 7 of invariant 7's issue): by
        code in Redis (`status`, `top`, the dashboard), by file for the dashboard, and told to the observer
        (`/metrics`). The coordinator's own failures (state unavailable, a disk error) are not refusals."""
        try:
            yield
        except CoordinatorError as exc:
            if exc.code not in (ErrorCode.STATE_UNAVAILABLE, ErrorCode.IO_ERROR):
                key = exc.details.get("path") if isinstance(exc.details.get("path"), str) else path
                self.count(session, self.native.key_in_root(key) or key, operation, refusal_outcome(exc))
            raise

    def count(self, session: str, key: str, operation: str, outcome: str) -> None:
        """Count one refusal or repair (`outcome`: an error code, REPAIRED or RESTORED). Best effort: a
        Redis failure loses the count, never the answer."""
        native = self.native
        if native.observer is not None:
            native.observer.write_finished(operation, outcome)
        state = native.access.store
        try:
            redis_call(lambda: state.r.hincrby(state.refusals_key, outcome, 1))
            if key:
                FileRefusals(state.r, native.access.namespace).record(outcome, key, session, operation)
        except CoordinatorError:
            pass

    # -- tickets ------------------------------------------------------------------------------------------
    def _take_ticket(self, session: str, key: str) -> str:
        return self._take_tickets(session, [key])[0]

    def _take_tickets(self, session: str, keys: list[str]) -> list[str]:
        """The write tickets: exclusive leases of `keys` (all or none, one grant) through the lease gate's
        grant. While another session holds one, its call is looked at (`_unblock`) and waited for up to
        TICKET_WAIT_S; any other lease covering a path is waited for as long, then refused naming its
        holder."""
        deadline = time.monotonic() + TICKET_WAIT_S
        key = ", ".join(keys)
        while True:
            try:
                return [x.id for x in self.gate.grant(session, keys, "exclusive", TICKET_TTL_S, fences=False)]
            except CoordinatorError as exc:
                if exc.code != ErrorCode.LEASED:
                    raise
                if any([self._unblock(k, session) for k in keys]):
                    continue
                if time.monotonic() >= deadline:
                    raise CoordinatorError(
                        ErrorCode.LEASED,
                        f"{exc.message} Another session is writing {key} or holds it; waited "
                        f"{TICKET_WAIT_S:g} s. Do something else first, then read the file again and retry.",
                        path=key,
                    ) from None
            time.sleep(_TICKET_POLL_S)

    def _unblock(self, key: str, waiter: str) -> bool:
        """Another session's open call holds `key`: if its write has landed, record it and release its
        ticket; if the file is unchanged `HOLDER_GRACE_S` after its grant, its call is over (module
        docstring): the ticket lapses. True when a ticket was ended (the waiter may try again at once)."""
        ended = False
        now = time.time()
        for entry in self.calls.on_path(key):
            if entry.session == waiter or entry.state != "open":
                continue
            unchanged = self.native.unchanged(key, entry.before)
            if unchanged and now - entry.started < HOLDER_GRACE_S:
                continue
            if not unchanged and self._still_writing(entry, now):
                continue
            for note in self._settle(entry, taken=False):
                self.calls.tell(entry.session, note)
            ended = True
        return ended

    def _is_file(self, key: str) -> bool:
        return os.path.isfile(os.path.join(self.native.disk.root, key))

    def _emptied(self, key: str) -> bool:
        """Whether `key` is an empty file now. Agents write a file in two system calls (Node's writeFile,
        a shell's `cat > f`: truncate, then write), and the watcher can look in between: an open call's
        empty file is not recorded as its write (the write's next change, or the call's end, is)."""
        try:
            return os.stat(os.path.join(self.native.disk.root, key)).st_size == 0
        except OSError:
            return False

    def _still_writing(self, entry: PendingCall, now: float) -> bool:
        """A call's file has changed, but its writer may not be done with it: a shell command (`cat > f <<EOF`
        truncates f, then writes it; a script may write it several times), or an agent's file tool whose
        file is empty (Node's writeFile truncates, then writes: seen with the real Gemini CLI, whose Edit a
        waiter settled as emptying the file, its content then counted as outside's). An empty file is a
        write half-way for as long as it stays empty (the waiter is refused `leased` after TICKET_WAIT_S; the
        call's after-hook, the session's next event or the ticket's end settles it); a shell command's
        written file counts as done for a waiter once quiet for HOLDER_GRACE_S; an agent's file tool that
        has written content has written its one write."""
        try:
            st = os.stat(os.path.join(self.native.disk.root, entry.key))
        except OSError:
            return False
        if st.st_size == 0:  # truncated, not yet written, whatever its time says (an empty file's modification
            return True  # time was seen 0.7 s before the truncation in a real race); its after-hook settles it
        return entry.operation == "shell" and now - st.st_mtime < HOLDER_GRACE_S

    def _settle(self, entry: PendingCall, *, taken: bool) -> tuple[str, ...]:
        """Record what `entry`'s call left on disk and end its ticket. An open call whose file is unchanged
        lapses (remembered, so that its late write is still told apart and repaired); a lapsed one whose file
        is unchanged stays lapsed. `taken`: the entry was already removed from the table (its after-hook);
        else it is removed here, by whichever process gets to it first. A lapsed call whose path another
        session now holds, changed since that session's grant, is not credited with the change (`_holder`):
        the holder's call records it; the lapsed call is left for its own after-hook, which tells its writer."""
        if entry.state == "lapsed" and (holder := self._holder(entry)) is not None:
            return self._ran_late(entry, [holder.session]) if taken else ()
        if not taken and not self.calls.remove(entry):
            return ()
        unchanged = self.native.unchanged(entry.key, entry.before)
        if unchanged and not taken:
            if entry.state == "open":
                self.gate.release(entry.session, entry.ticket, None)
            self._remember(entry.lapsed(time.time()))
            return ()
        if not taken:
            self._forget(entry)
        try:
            if unchanged:
                found = Found(None)
            elif _wrote_already(entry):  # its tool's one write is recorded: a later change is another program's
                self.native.record_outside(entry.key, OUTSIDE)
                found = Found(None)
            else:
                found = self._record(entry)
        finally:
            if entry.ticket is not None and entry.state == "open":
                self.gate.release(entry.session, entry.ticket, None)
        if taken and entry.state == "lapsed" and found.entry is None and not unchanged:
            return self._ran_late(entry)
        return self._told(entry, found)

    def _holder(self, entry: PendingCall) -> PendingCall | None:
        """Another session's open call on `entry`'s path whose file has changed since that call's grant: the
        change is the holder's (its ticket is the path's now), whatever `entry`'s late command did (a `sed`
        that matched nothing would otherwise be credited with the holder's write, and its model told nothing)."""
        for other in self.calls.on_path(entry.key):
            if (
                other.session != entry.session
                and other.state == "open"
                and not self.native.unchanged(entry.key, other.before)
            ):
                return other
        return None

    def _ran_late(self, entry: PendingCall, others: list[str] | None = None) -> tuple[str, ...]:
        """A lapsed call's after-hook, with the file holding a newer version by another session (`others`:
        the sessions that changed it; default: the writers recorded since its view) and no change of the
        call's own to record: its write, if it made one, had the same bytes as theirs, or was overwritten by
        them, or is mixed with the write of the session that holds the path now. Which cannot be told from the
        bytes, so the writer is told to look again (a stale rewrite that happens to equal the newer version,
        or a command that changed nothing, would otherwise count as done in silence)."""
        if others is None:
            others = [w for w in self.native.writers_since(entry.key, entry.before) if w != entry.session]
        if not others:
            return ()
        self.native.forget_view(entry.session, entry.key)
        return (
            f"Your {entry.operation} of {entry.key} ran after its write ticket had ended, and session "
            f"{', '.join(others)} changed {entry.key} in between: what your command wrote there, if anything, "
            f"is not in the file as its own change. Read {entry.key} again and check before going on.",
        )

    def _record(self, entry: PendingCall, *, writing: bool = False) -> Found:
        prepared = NativeWrite(entry.key, entry.before)
        return self.native.record_found(
            entry.session, prepared, entry.operation, call=entry.call or None, window=entry.window, writing=writing
        )

    def _told(self, entry: PendingCall, found: Found) -> tuple[str, ...]:
        """The late writer's note, and the overwritten sessions' notices (left for their next hook event).
        The repair is counted."""
        if found.entry is None or not found.overwritten:
            return ()
        self.count(entry.session, entry.key, entry.operation, RESTORED if found.how == "restore" else REPAIRED)
        who = ", ".join(found.overwritten)
        version = found.entry.version
        fixed = found.repair.version if found.repair is not None else version
        if found.how == "restore":
            done = (
                f"The two changes overlap, so the file was restored to session {who}'s version (version "
                f"{fixed}); your write is kept in the history as version {version} (undoable, restorable)."
            )
        elif found.how == "repair":
            done = f"Their change was put back into your result (version {fixed})."
        else:
            done = "Their change is still in the file."
        yours = {  # the same, as the overwritten session hears it
            "restore": f"The file was restored to your version (version {fixed}); that write is kept in the "
            f"history as version {version} (undoable, restorable).",
            "repair": f"Your change was put back into its result (version {fixed}).",
        }.get(found.how, "Your change is still in the file.")
        how = "landed after its write ticket had ended" if entry.call else "(a write its command did not name) landed"
        late = (
            f"Your {entry.operation} of {entry.key} {how}, over a change by session {who} that you had not seen. "
            f"{done} Read {entry.key} again before changing it."
        )
        for writer in found.overwritten:
            if writer != entry.session and writer != "outside":
                self.calls.tell(
                    writer,
                    f"Your change to {entry.key} was overwritten by a late {entry.operation} of session "
                    f"{entry.session} (version {version}). {yours} "
                    f"Read {entry.key} again before changing it.",
                )
        return (late,)


# The agents' file tools that write their file once per call (a shell command may write it any number of
# times): once the tree watcher has recorded such a call's write, a further change is not the call's.
# An interpreter's inline script (text.shellfiles' `script` targets): it may only have read its file, so
# its file left unchanged is not said to the model.
_PYTHON = re.compile(r"^python(?:3(?:\.\d+)?)?$")
_ONE_WRITE_OPERATIONS = frozenset({"edit", "multi_edit", "write", "notebook_edit"})


def _wrote_already(entry: PendingCall) -> bool:
    """Attribution (invariant 7 (b)): `entry`'s one write has been seen and recorded, so a change of its
    path seen since was made by another program between the agent's before- and after-hook."""
    return entry.changed and entry.operation in _ONE_WRITE_OPERATIONS


def _shown_count(printed: str, asked: int | None) -> int | None:
    """How many lines a partial shell read showed: what it asked for, or fewer at the file's end."""
    if asked is None:
        return None
    lines = printed.count("\n") + (0 if printed.endswith("\n") or not printed else 1)
    return min(asked, lines)


def _partial(view: ReadState) -> bool:
    """A view of some lines only: the agent's Edit result does not show the file, so it stays partial."""
    return view.kind == KIND_READ and (view.offset > 1 or view.limit > 0)


def _allowed(carried: Carried, operation: str, writers: list[str]) -> Allowed:
    """The answer to a write allowed, with the note of one carried over changes its session had not seen."""
    if not carried.changes:
        return Allowed()
    key = carried.prepared.key
    by = f" by session {', '.join(writers)}" if writers else ""
    lines = describe_changes(carried.changes)
    if carried.content is not None:
        note = (
            f"{key} had been changed{by} since you read it ({lines}, current numbering). Your write was merged "
            f"with those changes: the file now holds your content with their changes kept, not exactly what you "
            f"sent. Read {key} before relying on its exact text."
        )
    else:
        note = (
            f"{key} had been changed{by} since you read it ({lines}, current numbering); your {operation} does "
            f"not touch those lines, so it was applied to the current file, which keeps their changes."
        )
    return Allowed(carried.content, note)
