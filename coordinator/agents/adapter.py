"""The hook adapter: what one native tool call means for the coordinator, whatever agent made it.

It decides nothing of its own: staleness and the pre-image are the engine's (`engine.native`), leases are
the lease store's, shell refusals are the git guard's. What it adds is the order of the steps around an
agent's own write, which the agent performs between two hook calls:

- before a write or edit: refuse a stale or unread file (without waiting); take the write ticket, a short
  exclusive lease of the path, so that another hooked session waits for it (up to `TICKET_WAIT_S`) and is
  then refused naming the holder; under the ticket, judge the view again and keep the pre-image
  (`Coordinator.native.prepare_write`). A refusal never leaves a ticket behind.
- after it: record the history entry, the session's new view, attribution and change event
  (`Coordinator.native.record_write`), then release the ticket; after a failure or an interrupt, release the ticket
  only and record nothing. A ticket whose agent died runs out after `TICKET_TTL_S`.
- after a read: record the session's view from what the agent was shown (`Coordinator.native.record_view`).
- a session's end: the optional auto-commit (coordinator.git.autocommit).

Where the ticket is between the two hook calls (which may run in different processes): a Redis key per
(session, tool call) holding the lease id and the pre-image's hash, with the ticket's life. Losing it
(a Redis flush) only loses the record of that write: the session's next write is refused as stale.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable

from coordinator.agents.core import ALLOW, Decision, ToolCall
from coordinator.engine import Coordinator, native
from coordinator.errors import CoordinatorError, ErrorCode

TICKET_TTL_ENV = "EDIT_COORDINATOR_TICKET_TTL_S"
TICKET_WAIT_ENV = "EDIT_COORDINATOR_TICKET_WAIT_S"


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


# A write ticket's life: an agent killed between its hooks holds the path this long ($EDIT_COORDINATOR_TICKET_TTL_S).
TICKET_TTL_S = _seconds(TICKET_TTL_ENV, 30.0)
# How long a hooked write waits for another session's ticket before it is refused ($EDIT_COORDINATOR_TICKET_WAIT_S).
TICKET_WAIT_S = _seconds(TICKET_WAIT_ENV, 5.0)
_TICKET_POLL_S = 0.01

# Refusals that reach the agent as a deny reason; any other CoordinatorError is the coordinator's own
# failure (state unavailable, a disk error) and propagates: the way in fails closed on it.
_DENIABLE = frozenset(
    {
        ErrorCode.NOT_READ,
        ErrorCode.STALE,
        ErrorCode.LEASED,
        ErrorCode.OUTSIDE_ROOT,
        ErrorCode.INVALID_ARGUMENT,
        ErrorCode.BINARY_FILE,
        ErrorCode.UNSUPPORTED_ENCODING,
        ErrorCode.TOO_LARGE,
        ErrorCode.PERMISSION_DENIED,
        ErrorCode.LOCK_TIMEOUT,
        ErrorCode.IS_DIRECTORY,
        ErrorCode.SPECIAL_FILE,
    }
)

ShellGuard = Callable[[str, str, str], "str | None"]
SessionEnd = Callable[[str, str], "str | None"]
log = logging.getLogger("coordinator.agents")


class HookAdapter:
    """Applies `ToolCall`s to one coordinator (a local engine on the root, or the service's).

    shell_guard(command, root, session) -> refusal text or None (default: coordinator.git.guard's);
    session_end(root, session) -> commit id or None (default: coordinator.git.autocommit.on_session_end)."""

    def __init__(
        self, coord: Coordinator, shell_guard: ShellGuard | None = None, session_end: SessionEnd | None = None
    ) -> None:
        self.coord = coord
        self.shell_guard = shell_guard
        self.session_end = session_end

    def handle(self, call: ToolCall) -> Decision:
        """The decision for one call. A CoordinatorError of the coordinator's own (state unavailable, ...)
        propagates: the way in fails closed on it."""
        if call.kind == "session":
            self._end(call)
            return ALLOW
        if call.kind == "shell":
            return self._shell(call) if call.phase == "before" else ALLOW
        if call.kind == "other" or not call.path:
            return ALLOW
        try:
            if call.kind == "read":
                if call.phase == "after" and call.shown is not None:
                    self.coord.native.record_view(call.session, call.path, call.shown, call.offset or 1, call.limit)
                return ALLOW
            if call.phase == "before":
                return self._before_write(call)
        except CoordinatorError as exc:
            if exc.code in _DENIABLE:
                return Decision.deny(exc.message, exc.code.value)
            raise
        self._after_write(call, succeeded=call.phase == "after")
        return ALLOW

    # -- writes -------------------------------------------------------------------------------------------
    def _before_write(self, call: ToolCall) -> Decision:
        assert call.path is not None
        whole = call.operation == "write"
        judged = self.coord.native.judge_write(call.session, call.path, whole=whole)
        if judged.refusal is not None:
            return Decision.deny(judged.refusal.message, judged.refusal.code.value)
        ticket = self._take_ticket(call.session, judged.key)
        try:
            prepared = self.coord.native.prepare_write(call.session, call.path, whole=whole, view=judged.view)
            self._remember(call, ticket, prepared)
        except BaseException:
            self._release(call.session, ticket)
            raise
        return ALLOW

    def _after_write(self, call: ToolCall, *, succeeded: bool) -> None:
        remembered = self._recall(call)
        if remembered is None:
            return  # no ticket taken (refused before), or it ran out: nothing to record or release
        ticket, prepared = remembered
        try:
            if succeeded:
                self.coord.native.record_write(
                    call.session, prepared, call.operation or "write", call=call.tool_use_id or None
                )
        finally:
            self._release(call.session, ticket)

    # -- tickets ------------------------------------------------------------------------------------------
    def _take_ticket(self, session: str, key: str) -> str | None:
        """A short exclusive lease of `key` for `session`, waited for up to TICKET_WAIT_S while another
        session holds one (or any lease covering the path). The session's own leases never block it."""
        store = self.coord.lease_store
        deadline = time.monotonic() + TICKET_WAIT_S
        while True:
            try:
                return store.grant(session, [key], "exclusive", TICKET_TTL_S)[0].id
            except CoordinatorError as exc:
                if exc.code != ErrorCode.LEASED:
                    raise
                if time.monotonic() >= deadline:
                    raise CoordinatorError(
                        ErrorCode.LEASED,
                        f"{exc.message} Another session is writing {key} or holds it; waited "
                        f"{TICKET_WAIT_S:g} s. Do something else first, then read the file again and retry.",
                        path=key,
                    ) from None
            time.sleep(_TICKET_POLL_S)

    def _release(self, session: str, ticket: str | None) -> None:
        if ticket is not None:
            self.coord.lease_store.release(session, lease_id=ticket)

    def _remember(self, call: ToolCall, ticket: str | None, prepared: native.NativeWrite) -> None:
        value = json.dumps({"ticket": ticket, "key": prepared.key, "before": prepared.before})
        self.coord.native.keep_pending(call.session, call.tool_use_id, value, TICKET_TTL_S)

    def _recall(self, call: ToolCall) -> tuple[str | None, native.NativeWrite] | None:
        raw = self.coord.native.take_pending(call.session, call.tool_use_id)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return data["ticket"], native.NativeWrite(str(data["key"]), data["before"])
        except (ValueError, KeyError, TypeError):
            return None

    # -- shell and the session's end ----------------------------------------------------------------------
    def _shell(self, call: ToolCall) -> Decision:
        if not call.command:
            return ALLOW
        guard = self.shell_guard
        if guard is None:
            from coordinator.git.guard import check_shell_command

            guard = check_shell_command
        reason = guard(call.command, self.coord.root, call.session)
        return ALLOW if reason is None else Decision.deny(reason, ErrorCode.INVALID_ARGUMENT.value)

    def _end(self, call: ToolCall) -> None:
        """The optional auto-commit of the session's writes; never blocks the end (failures are logged)."""
        end = self.session_end
        if end is None:
            from coordinator.git.autocommit import on_session_end

            end = on_session_end
        try:
            end(self.coord.root, call.session)
        except Exception:
            log.exception("auto-commit at the end of session %s failed", call.session)
