"""The hook adapter: one native tool call (a `ToolCall`, whatever agent made it) turned into the calls of
the agent-write protocol (`Coordinator.agent_writes`, coordinator/engine/agentwrites.py, which owns the
steps, the write tickets and the memory of a call between its hooks), and its answer into a `Decision`.

It decides nothing of its own: refusals are the engine's, shell refusals the git guard's. Every event of a
session first settles that session's other open write calls (a ticket ends with its call); a write's
before-hook takes the ticket and keeps the pre-image; its after-hook records what landed; a read's after-hook
records the view from what the agent was shown; a session's end settles everything it left open and runs
the optional auto-commit (coordinator.git.autocommit). Notes for the model (its late write repaired, a notice
that its own write was) ride the answer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from coordinator.agents.core import ALLOW, Decision, ToolCall
from coordinator.arguments import check_call_id, check_session_id
from coordinator.engine import Coordinator
from coordinator.engine.agentwrites import (
    TICKET_TTL_ENV,
    TICKET_TTL_S,
    TICKET_WAIT_ENV,
    TICKET_WAIT_S,
    Settled,
)
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.semantics import EditSpec

__all__ = ["TICKET_TTL_ENV", "TICKET_TTL_S", "TICKET_WAIT_ENV", "TICKET_WAIT_S", "HookAdapter"]

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

ShellGuard = Callable[[str, str, str, "str | None"], "str | None"]
SessionEnd = Callable[[str, str], "str | None"]
log = logging.getLogger("coordinator.agents")


class HookAdapter:
    """Applies `ToolCall`s to one coordinator (a local engine on the root, or the service's).

    shell_guard(command, root, session, cwd) -> refusal text or None (default: coordinator.git.guard's);
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
        check_session_id(call.session)  # ids from a hook event reach history, trailers and Redis: one rule
        if call.tool_use_id:
            check_call_id(call.tool_use_id)
        protocol = self.coord.agent_port()
        if call.kind == "session":  # no agent shows a note at a turn's end: kept for the next turn's prompt
            protocol.keep_notes(call.session, protocol.settle_session(call.session, end=True))
            self._end(call)
            return ALLOW
        if call.kind == "prompt":  # a new turn: what was kept for the session (its open calls settled first)
            return Decision.note(protocol.settle_session(call.session).text())
        if call.kind == "other" or (call.kind != "shell" and not call.path) or self._outside(call.path):
            return ALLOW
        notes = protocol.settle_session(call.session, but=call.tool_use_id)
        try:
            decision = self._decide(call)
        except CoordinatorError as exc:
            if exc.code not in _DENIABLE:
                raise
            if call.phase != "before":  # after the tool there is nothing to refuse: only nothing recorded
                return Decision.note(notes.text())
            return Decision.deny(_joined(notes.text(), exc.message), exc.code.value)
        told = notes.text()
        if not told:
            return decision
        if decision.allow and call.notes_hidden:  # its answer shows the model nothing: told at the next event
            protocol.keep_notes(call.session, notes)
            return decision
        return decision._replace(reason=_joined(told, decision.reason))

    def policy(self) -> str:
        """The policy of the hooked sessions' writes (docs/agents/agent-writes.md, "Policy rebase"): the
        coordinator's, which its maker took from the project config (`policy` in `.edit-coordinator.toml` or
        `[tool.edit-coordinator]`: the repository's hook service starts with it and restarts when the config
        changes; a shared `serve --policy`; the hook command's own coordinator, cli/hook.py `_local`)."""
        return self.coord.policy

    def _outside(self, path: str | None) -> bool:
        """An absolute path outside the repository (its folder and its real path both elsewhere): not the
        repository's file, so not guarded (the agent's own tools handle it as they would without hooks).
        A path inside the root that leads out through a symlink is guarded, and refused as outside_root."""
        if path is None or not os.path.isabs(path):
            return False
        root = os.path.realpath(self.coord.root)
        inside = (os.path.normpath(path), os.path.realpath(path))
        return not any(p == root or p.startswith(root.rstrip("/") + "/") for p in inside)

    def _decide(self, call: ToolCall) -> Decision:
        protocol = self.coord.agent_port()
        if call.kind == "shell":
            return self._shell(call)
        assert call.path is not None
        if call.kind == "read":
            if call.phase == "after" and call.shown is not None:
                protocol.after_read(call.session, call.path, call.shown, call.offset or 1, call.limit)
            return ALLOW
        if call.phase == "before":
            reason = self._git_guard(call)[0] if call.command else None  # a patch run by a shell command line
            if reason is not None:
                return Decision.deny(reason, ErrorCode.INVALID_ARGUMENT.value)
            whole = call.operation == "write"
            allowed = protocol.before_write(
                call.session, call.tool_use_id, call.path, whole=whole, operation=call.operation or "write",
                policy=self.policy(), edits=tuple(EditSpec(*e) for e in call.edits), content=call.content,
            )  # fmt: skip
            if allowed.note and call.notes_hidden:  # its answer shows the model nothing: told at the next event
                protocol.keep_notes(call.session, Settled((allowed.note,)))
                return Decision(True, "", "", allowed.content)
            return Decision(True, allowed.note, "", allowed.content)
        done = protocol.after_write(call.session, call.tool_use_id, succeeded=call.phase == "after")
        return Decision.note(done.text())

    # -- shell and the session's end ----------------------------------------------------------------------
    def _shell(self, call: ToolCall) -> Decision:
        """A shell command: before, the git guard's refusal, then the protocol's (its write targets); after,
        its targets recorded and what it printed taken as a read."""
        if not call.command:
            return ALLOW
        protocol = self.coord.agent_port()
        if call.phase != "before":
            done = protocol.after_shell(call.session, call.tool_use_id, call.command, call.cwd, call.shown)
            return Decision.note(done.text())
        reason, unjudged = self._git_guard(call)
        if reason is not None:
            return Decision.deny(reason, ErrorCode.INVALID_ARGUMENT.value)
        protocol.before_shell(call.session, call.tool_use_id, call.command, call.cwd)
        if unjudged and call.notes_hidden:  # its answer shows the model nothing: told at the next event
            protocol.keep_notes(call.session, Settled((unjudged,)))
            return ALLOW
        return Decision.note(unjudged)

    def _git_guard(self, call: ToolCall) -> tuple[str | None, str]:
        """The git guard's refusal of the call's command line (None: it may run), and for a line it lets run,
        what in it the guard could not judge (a script file, `eval`, ...: "" when nothing)."""
        assert call.command is not None
        if self.shell_guard is not None:
            return self.shell_guard(call.command, self.coord.root, call.session, call.cwd), ""
        from coordinator.git.guard import judge_shell_command

        answer = judge_shell_command(call.command, self.coord.root, call.session, call.cwd)  # paths from its cwd
        return answer.message(), answer.note()

    def _end(self, call: ToolCall) -> None:
        """The optional auto-commit of the session's writes; never blocks the end. A failure is logged, and
        appended to the hook failures' log that `status` and the dashboard show (a commit that silently never
        happened, say for want of a git identity, was visible only in the service's log)."""
        try:
            if self.session_end is not None:
                self.session_end(self.coord.root, call.session)
            else:  # the session's own settings, as its hook sent them: never this process's environment
                from coordinator.git.autocommit import on_session_end

                on_session_end(self.coord.root, call.session, env=dict(call.settings))
        except Exception as exc:
            from coordinator.agents import failures

            log.exception("auto-commit at the end of session %s failed", call.session)
            what = exc.message if isinstance(exc, CoordinatorError) else f"{type(exc).__name__}: {exc}"
            failures.record(self.coord.root, "", "auto-commit", f"session {call.session}: {what}")


def _joined(*texts: str) -> str:
    return "\n\n".join(t for t in texts if t)
