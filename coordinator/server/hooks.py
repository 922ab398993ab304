"""`POST /v1/hooks/{agent}`: an agent's hook event answered by the service (Claude Code's `http` hook type,
and the `edit-coordinator hook` command when it is given a service).

The body is the agent's hook payload, as its hooks send it. The answer is always 200 with the agent's
hook answer in the body: Claude Code treats a non-2xx status, a connection failure or a timeout of an
`http` hook as a non-blocking error and lets the tool call go on, so every refusal, a bad token, a bad
payload and a failure of the coordinator's own are all a deny in a 200 body here. `?answer=command` gives
instead what a command hook process would give (`{"exit_code", "stdout", "stderr"}`, and `code`: the
refusal's code, "unauthorized" for a token the service does not take). `?answer=plain` gives the same
without JSON, for the command hook's fast client (coordinator/cli/fasthook.py), which loads no json:
one line `EXIT_CODE CODE STDOUT_BYTES` (CODE "-" when there is none), then the stdout bytes, then the
stderr bytes (`plain_answer`).

Token: the admin token (`edit-coordinator token --admin`, or the one `serve` prints), since an agent's
sessions are named by the agent at run time (Claude Code's `session_id`) and the hook acts for each; or a
session token of the session the payload names (one token per agent session, where the ids are known in
advance). A viewer token is refused. The body (at most the service's body limit) is read before the token
is checked, unlike the other routes: a refusal must be a deny in the shape of that event's answer.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from coordinator.agents import FRONT_ENDS, failures, front_end
from coordinator.agents.core import (
    AGENT_PID_HEADER,
    HOOK_KEY_HEADER,
    Decision,
    HookAnswer,
    ToolCall,
    event_of,
    fails_closed,
    settings_from_headers,
)
from coordinator.endpoint import HOOK_PATH
from coordinator.errors import CoordinatorError
from coordinator.server.auth import Principal
from coordinator.server.common import ServiceError, dumps, error_answer, public
from coordinator.server.requests import header_map, read_body

if TYPE_CHECKING:
    from coordinator.agents.adapter import HookAdapter
    from coordinator.server.app import App
    from coordinator.server.routes import Answer

HOOKS_PREFIX = HOOK_PATH.partition("{")[0]  # "/v1/hooks/": the route table's hook route, matched by prefix
log = logging.getLogger("edit_coordinator.server")


def is_hook_path(path: str) -> bool:
    return path.startswith(HOOKS_PREFIX)


async def answer_hook(app: App, scope: dict[str, Any], receive: Any) -> Answer:
    """The agent's hook answer to one event (see the module docstring)."""
    agent = scope["path"][len(HOOKS_PREFIX) :]
    if agent not in FRONT_ENDS:
        known = ", ".join(sorted(FRONT_ENDS))
        message = f"There are no hooks for agent {agent[:60]!r}; known: {known}."
        return error_answer(ServiceError("not_found", message), app.config.root)
    if scope["method"] != "POST":
        return error_answer(ServiceError("method_not_allowed", f"{scope['path']} accepts POST."), app.config.root)
    module = front_end(agent)
    form = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("answer", [""])[0]
    call: ToolCall | None = None
    payload: Any = None
    try:
        headers = header_map(scope)
        # The body (bounded) before the token: a refusal must be a deny in the shape of the event's answer.
        body = await read_body(headers, receive, app.config.max_body_bytes)
        payload = json.loads(body)
        call = module.parse(payload)
        if call is not None:  # the session's own settings, sent by its hook client (never this process's)
            call = call._replace(settings=settings_from_headers(headers))
        principal = _principal(app, scope, headers)
        _note_agent(headers, payload)
        decision = Decision(True) if call is None else await _decide(app, principal, call)
    except (ServiceError, CoordinatorError) as exc:
        decision = Decision.deny(_failed(exc.message), getattr(exc.code, "value", exc.code))
    except ValueError as exc:  # bad JSON, a payload that is not a hook event
        decision = Decision.deny(_failed(f"the hook payload could not be read ({exc})."), "invalid_argument")
    except Exception:
        log.exception("hook %s failed", agent)
        decision = Decision.deny(_failed("the coordinator failed on this call (see its log)."), "internal")
    answer: HookAnswer = module.render(call, decision)
    refresh = decision.code == "unauthorized" and form in ("command", "plain")  # the client mints a new token
    if not decision.allow and not refresh and not fails_closed(event_of(payload)):
        # an event that guards no write: the agent goes on, the failure is logged where `status` shows it
        failures.record(app.config.root, agent, event_of(payload) or "", decision.reason)
        answer = module.render(None, Decision(True))
    _stop_if_done(app, call)
    if form == "command":
        command = {"exit_code": answer.exit_code, "stdout": answer.stdout, "stderr": answer.stderr}
        return 200, dumps({**command, "code": decision.code}), []
    if form == "plain":
        return 200, plain_answer(answer, decision.code), [(b"content-type", b"text/plain; charset=utf-8")]
    return 200, dumps(public(answer.body or {}, app.config.root)), []


def _stop_if_done(app: App, call: ToolCall | None) -> None:
    """After an answer (which the running calls' settings still give): the on-demand service stops when its
    project config changed (and, serving http hooks, which cannot start it, runs itself again) or when the
    last session it serves ended. Graceful: running calls finish."""
    if _config_changed(app):
        log.info("the project config of %s changed: the hook service stops; the next hook starts it", app.config.root)
        if app.config.hook_port:
            _restart.append(True)  # no hook of Claude Code's can start it: it starts itself again (cli/serve.py)
        os.kill(app.config.supervisor_pid or os.getpid(), signal.SIGTERM)
    elif _last_session_ended(app, call):
        log.info("the last session of %s ended: the hook service stops; the next hook starts it", app.config.root)
        os.kill(app.config.supervisor_pid or os.getpid(), signal.SIGTERM)


async def _decide(app: App, principal: Any, call: ToolCall) -> Decision:
    _check_hook_token(principal, call.session)
    loop = asyncio.get_running_loop()
    if app.coord is None:
        await loop.run_in_executor(app.executor, app.open)
    hooks = _adapter(app)
    decision: Decision = await loop.run_in_executor(app.executor, lambda: hooks.handle(call))
    return decision


# -- the on-demand hook service stops when the last session it serves ends -----------------------------------

_live: dict[str, float] = {}  # session -> when its last event came (monotonic), until its SessionEnd
_agents: dict[str, int] = {}  # session -> its agent's pid (AGENT_PID_HEADER), until its SessionEnd


def _note_agent(headers: dict[str, str], payload: Any) -> None:
    """Remember the agent process a command hook names (AGENT_PID_HEADER) for the event's session."""
    pid = headers.get(AGENT_PID_HEADER, "")
    session = payload.get("session_id") if isinstance(payload, dict) else None
    if pid.isdigit() and 1 < int(pid) < 1 << 22 and isinstance(session, str) and len(_agents) < 4096:
        _agents[session.split("/")[0]] = int(pid)


def agents_alive() -> bool:
    """Whether an agent process a command hook named (and whose session has not ended) still runs: while
    one does, the on-demand service does not stop for being idle (its http hooks could not start it)."""
    from coordinator.disk.fsio import pid_alive

    for session, pid in list(_agents.items()):
        if not pid_alive(pid):
            del _agents[session]
    return bool(_agents)


def _last_session_ended(app: App, call: ToolCall | None) -> bool:
    """Whether `call` is the SessionEnd of the last live session of a repository's hook service (one started
    on demand, `idle_exit_s` > 0). A session is live from its events until its SessionEnd (its subagents'
    with it), or until it has been silent for the idle time; a session this service never heard from is
    not known, and its next hook starts the service again."""
    if app.config.idle_exit_s <= 0 or call is None:
        return False
    now = time.monotonic()
    if call.event != "SessionEnd":
        _live[call.session] = now
        return False
    top = call.session.split("/")[0]
    for session in [s for s in _live if s == top or s.startswith(top + "/")]:
        del _live[session]
    _agents.pop(top, None)
    return not any(now - seen < app.config.idle_exit_s for seen in _live.values()) and not agents_alive()


# -- the on-demand hook service restarts when its project config changes ----------------------------------

_STARTED_NS = time.time_ns()  # this module is loaded as the service starts
_restart: list[bool] = []  # the service of http hooks stopped for its config: it runs itself again


def restart_wanted() -> bool:
    """Whether the service stopped for a changed config and must run again (it has an http hook port)."""
    return bool(_restart)


_CONFIG_FILES = (".edit-coordinator.toml", "pyproject.toml")  # coordinator/cli/config.py's OWN_FILE, PYPROJECT
_watched: dict[str, tuple[object, object]] = {}  # root -> (the files' stat stamp, the config they hold)


def _config_changed(app: App) -> bool:
    """Whether the project config changed since this service started (a repository's hook service alone:
    one started on demand, `idle_exit_s` > 0; a `serve` someone runs is theirs to restart). Two stats per
    event; the files are read only when a stamp moved, and a pyproject.toml edit that leaves
    [tool.edit-coordinator] as it was changes nothing."""
    if app.config.idle_exit_s <= 0:
        return False
    root = app.config.root
    stamp = tuple(_stat(os.path.join(root, name)) for name in _CONFIG_FILES)
    seen = _watched.get(root)
    if seen is None:
        _watched[root] = (stamp, _config_of(root))
        return any(s is not None and s[0] > _STARTED_NS for s in stamp)  # changed before the first event
    if stamp == seen[0]:
        return False
    config = _config_of(root)
    _watched[root] = (stamp, config)
    return config != seen[1]


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _config_of(root: str) -> object:
    """What the config files say, for comparison only (coordinator/cli/config.py reads and checks them)."""
    import tomllib

    for name in _CONFIG_FILES:
        try:
            with open(os.path.join(root, name), "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            continue
        except (OSError, tomllib.TOMLDecodeError) as exc:
            return ("unreadable", name, str(exc))
        if name == "pyproject.toml":
            tool = data.get("tool")
            table = tool.get("edit-coordinator") if isinstance(tool, dict) else None
            if table is None:
                continue
            return (name, table)
        return (name, data)
    return None


def plain_answer(answer: HookAnswer, code: str) -> bytes:
    """The `?answer=plain` body: `EXIT_CODE CODE STDOUT_BYTES` on one line, the stdout, the stderr. CODE is a
    refusal's ErrorCode value (no spaces by construction; "-" for none), so the line splits on spaces."""
    out, err = answer.stdout.encode(), answer.stderr.encode()
    return b"%d %s %d\n" % (answer.exit_code, (code or "-").replace(" ", "_").encode(), len(out)) + out + err


def _failed(message: str) -> str:
    return f"The edit coordinator could not check this call, so it is refused: {message}"


def _adapter(app: App) -> HookAdapter:
    hooks: HookAdapter | None = app.hooks
    coord, _ = app.opened()
    if hooks is None or hooks.coord is not coord:
        from coordinator.agents.adapter import HookAdapter

        hooks = HookAdapter(coord)
        app.hooks = hooks
    return hooks


def _principal(app: App, scope: dict[str, Any], headers: dict[str, str]) -> Any:
    """Who sends the event: on the http hooks' loopback port (--hook-http), whoever holds the repository's
    hook key (the hook route alone is answered there: App._dispatch); elsewhere the bearer token's holder."""
    if not app.on_hook_port(scope):
        return app.authenticate(headers.get("authorization"))
    given = headers.get(HOOK_KEY_HEADER, "")
    if not hmac.compare_digest(given.encode("utf-8", "replace"), app.config.hook_key.encode()):
        raise ServiceError(
            "unauthorized",
            "This hook did not carry the repository's hook key. Run `edit-coordinator init claude-code` again.",
        )
    return Principal("admin", None, float("inf"))


def _check_hook_token(principal: Any, session: str) -> None:
    """The hook route takes the event's session's own token or the admin token; the refusal says which."""
    if principal.is_admin:
        return
    if principal.is_viewer:
        raise ServiceError(
            "forbidden",
            "The hook route does not take a viewer token (read-only); it takes the token of the event's session "
            f"({session!r}) or the admin token.",
        )
    if principal.session not in (session, session.split("/")[0]):
        raise ServiceError(
            "forbidden",
            f"This token is for session {principal.session!r}, and the hook event is from session {session!r} "
            "(another session): the hook route takes the token of the event's session or the admin token.",
        )
