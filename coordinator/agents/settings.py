"""The hooks `edit-coordinator init` writes into an agent's settings, merged without loss, checked and taken
out again.

Claude Code (`.claude/settings.local.json`, or `.claude/settings.json` with scope "project"), Codex
(`.codex/hooks.json`) and Gemini CLI (`.gemini/settings.json`) share one shape: `hooks` maps an event name to
a list of matcher groups `{"matcher": ..., "hooks": [handler, ...]}`. What differs is the events, the tool
names in the matchers and the handler's fields; `plan` says that per agent.

Invariants, enforced here:
- Merging keeps everything that is not ours: other hooks (in groups of their own or next to ours), the
  permissions, unknown keys, their order. Ours are recognised by what they run (`is_ours`), never by
  position, so a second `init` adds nothing and an `init` after an upgrade replaces our old handlers.
- `remove` takes out exactly our handlers, the deny rules `init` added (as the manifest it returned
  records), and the containers it created and left empty.
- Settings that are not what the agent itself reads (not JSON, duplicate keys, a wrong type where ours
  would go) are refused with `invalid_argument`, the file untouched: a merge that guessed would lose data.

Pure functions on parsed settings, apart from `load` and `save` at the end (file I/O, an atomic replace).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coordinator.errors import CoordinatorError, ErrorCode

AGENTS = ("claude-code", "codex", "gemini")
Scope = Literal["local", "project"]

PRE_TIMEOUT_S = 60  # above the hook's own limits (a service call 30 s, the ticket's wait 5 s): the hook answers first
POST_TIMEOUT_S = 60
SESSION_END_TIMEOUT_S = 3  # Codex caps SessionEnd hooks at 3 s
GEMINI_NAME = "edit-coordinator"
MCP_SERVER = "edit-coordinator"  # the MCP server's name in Claude Code (`claude mcp add edit-coordinator ...`)
MCP_HOOK_TOOL = "hook"  # coordinator/tools/hook_tool.py's NAME
TOKEN_ENV_DEFAULT = "EDIT_COORDINATOR_TOKEN"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OUR_COMMAND = re.compile(
    r"(?:(?:edit-coordinator['\"]?|-m\s+coordinator\.cli)\s+hook|/coordinator/cli/hookclient\.py['\"]?)\s+"
    r"(claude-code|codex|gemini)\b"
)
_FAST_COMMAND = re.compile(r"/coordinator/cli/hookclient\.py['\"]?\s")
_OUR_URL = re.compile(r"/v1/hooks/(claude-code|codex|gemini)/?$")


@dataclass(frozen=True)
class Target:
    """How the agent reaches the coordinator. `program`: the argv that starts the CLI (an absolute path, so
    that neither PATH nor a version-manager shim decides); `server`: a running `serve` (base URL) instead of
    the root's embedded default; `token_env`: the variable that holds its bearer token (never the token)."""

    program: tuple[str, ...]
    server: str | None = None
    token_env: str = TOKEN_ENV_DEFAULT
    hook_type: str = "command"  # Claude Code only: "mcp_tool", the `hook` tool of the MCP server `MCP_SERVER`
    client: tuple[str, ...] = ()  # the fast client's argv (interpreter, flags, hookclient.py), used with `root`
    root: str | None = None  # the repository whose hook service the fast client asks (an absolute real path)
    hook_url: str | None = None  # hook_type "http" (Claude Code): the hook service's loopback base URL
    hook_key: str | None = None  # ... and the key its requests carry (cli/hookservice.py's http.json)


@dataclass(frozen=True)
class Wanted:
    """One handler of ours: under `event`, in a group whose matcher is `matcher` (None: no matcher)."""

    event: str
    matcher: str | None
    handler: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    agent: str
    path: str  # the settings file, relative to the root
    hooks: tuple[Wanted, ...]
    deny: tuple[str, ...] = ()  # permissions.deny rules closing a bypass (Claude Code only)
    env: tuple[tuple[str, str], ...] = ()  # variables for the agent's `env` (Claude Code: the Bash-first opt-out)

    @property
    def events(self) -> frozenset[str]:
        return frozenset(w.event for w in self.hooks)


@dataclass
class Manifest:
    """What one `init` added beyond its handlers, so that `remove` takes out that and no more."""

    created_file: bool = False
    deny_added: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # containers made: "hooks", "hooks.PreToolUse", ...
    before: str | None = None  # the file's text before the first `init` (None: unknown, or no file)
    after: str | None = None  # the fingerprint of the text `init` wrote last (`fingerprint`)

    def to_dict(self) -> dict[str, Any]:
        return {
            "created_file": self.created_file,
            "deny_added": self.deny_added,
            "created": self.created,
            "before": self.before,
            "after": self.after,
        }

    def joined(self, later: Manifest) -> Manifest:
        """This record with a later `init`'s additions (which adds nothing the first one already did); the
        texts are the later one's (`text_before` worked them out knowing this record)."""
        return Manifest(
            self.created_file or later.created_file,
            [*self.deny_added, *(x for x in later.deny_added if x not in self.deny_added)],
            [*self.created, *(x for x in later.created if x not in self.created)],
            later.before,
            later.after,
        )

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        if not isinstance(data, dict):
            return cls()
        deny = [x for x in data.get("deny_added", []) if isinstance(x, str)]
        created = [x for x in data.get("created", []) if isinstance(x, str)]
        before, after = data.get("before"), data.get("after")
        return cls(
            bool(data.get("created_file", False)),
            deny,
            created,
            before if isinstance(before, str) else None,
            after if isinstance(after, str) else None,
        )

    def restores(self, text: str | None) -> str | None:
        """The user's own text to put back on `remove`: the text before `init`, but only while the file is
        byte for byte what `init` wrote last (so the remembered text cannot be stale); None otherwise (the
        caller then writes the parsed file without our entries)."""
        if text is None or self.before is None or self.after is None or fingerprint(text) != self.after:
            return None
        return self.before


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_before(earlier: Manifest, text: str | None, settings: dict[str, Any], agent: str) -> str | None:
    """What `init` about to rewrite a file of `text` (None: no file) remembers as the user's own text:
    the earlier record's, while the file is still what that `init` wrote; the text itself when nothing of
    ours is in it and no record says `init` was here; otherwise None (the user's own text is not known)."""
    if text is None:
        return None
    if earlier.after is not None:
        return earlier.restores(text)
    if earlier.created or earlier.deny_added or ours(settings, agent):
        return None
    return text


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.added or self.updated or self.removed)


# -- what each agent gets -------------------------------------------------------------------------------------


def settings_path(agent: str, scope: Scope = "local") -> str:
    if agent == "claude-code":
        return ".claude/settings.local.json" if scope == "local" else ".claude/settings.json"
    if agent == "codex":
        return ".codex/hooks.json"
    if agent == "gemini":
        return ".gemini/settings.json"
    raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"No set-up for {agent!r}: choose one of {', '.join(AGENTS)}.")


def hook_command(agent: str, target: Target, event: str | None = None) -> str:
    """The shell command line a command hook of `event` runs (None: a hook that guards a write).

    Only a hook that guards a write (core.GUARD_EVENTS) fails closed: its command ends in a fallback that
    turns every other failure of the program (missing: 127, not executable: 126, a crash: 1) into exit 2,
    the status the agents treat as a refusal. Every other event's command carries `--fail-open` and its
    fallback answers "go on" (exit 0; Gemini CLI's `{}`): exit 2 at the end of a turn keeps an agent going,
    so a moved interpreter would otherwise loop it. Either fallback appends the failure to the state
    folder's failure log (coordinator/agents/failures.py's line), where `status` and `init --check` show it.
    """
    from coordinator.agents.core import fails_closed

    closed = fails_closed(event)
    if target.server is None and target.client and target.root is not None:
        argv = [*target.client, agent, "--root", target.root]
        prefix = ""
    else:
        argv = [*target.program, "hook", agent]
        prefix = ""
        if target.server is not None:
            argv += ["--server", target.server]
            prefix = f'EDIT_COORDINATOR_TOKEN="${{{target.token_env}}}" '
    if not closed:
        argv.append("--fail-open")
    return prefix + " ".join(shlex.quote(a) for a in argv) + _fallback(agent, event, target.root, closed=closed)


def _fallback(agent: str, event: str | None, root: str | None, *, closed: bool) -> str:
    """` || { ... }`: what the shell does when the hook program itself fails (see `hook_command`). The texts
    hold no quote, backquote or `$` but the status `$s`: they are safe inside double quotes."""
    from coordinator.agents.failures import line
    from coordinator.disk.layout import hook_failures_file, state_dir_of

    what = (
        "the hook command exited $s (its interpreter or script is missing or broken): run edit-coordinator "
        f"init {agent} again"
    )
    log = ""
    if root is not None:
        entry = line(agent, event or "", what, 0).rstrip("\n").split(" ", 1)[1]  # the line after its time
        log = f'echo "$(date +%s) {entry}" 2>/dev/null >>{shlex.quote(str(hook_failures_file(state_dir_of(root))))}; '
    if closed:
        return f' || {{ s=$?; [ $s = 2 ] || {{ {log}echo "edit-coordinator hook: {what}" >&2; }}; exit 2; }}'
    go_on = "echo '{}'; " if agent == "gemini" else ""
    return f" || {{ s=$?; {log}{go_on}exit 0; }}"


def plan(agent: str, target: Target, scope: Scope = "local") -> Plan:
    path = settings_path(agent, scope)
    if agent == "claude-code":
        env = ((BASH_FIRST_ENV, "0"),) if claude_reads(BASH_FIRST_ENV) else ()
        return Plan(agent, path, _claude_hooks(target), deny=("NotebookEdit",), env=env)
    if agent == "codex":
        return Plan(agent, path, _codex_hooks(target))
    return Plan(agent, path, _gemini_hooks(target))


# Claude Code's auto and bypassPermissions modes tell the model to edit with sed, here-documents and scripts
# rather than its Edit/Write tools (an experiment: the shell channel is guarded less than the tools, see
# docs/agents/agent-writes.md); the release's own code reads this variable first and turns that off at "0".
BASH_FIRST_ENV = "CLAUDE_CODE_THRIFTY_SONIC"


def claude_reads(variable: str) -> bool:
    """Whether the `claude` found on PATH names `variable` in its code (so that setting it means something
    to this release). False when there is no `claude` to ask: nothing is written that nobody confirmed."""
    import shutil

    found = shutil.which("claude")
    if found is None:
        return False
    try:
        real = os.path.realpath(found)
        if real.endswith(".js") or os.path.getsize(real) > 8 << 20:
            return _mentions(real, variable.encode())
        package = Path(real).parent  # a launcher: the native binary lives in the package beside it
        return any(_mentions(str(f), variable.encode()) for f in package.rglob("*") if f.is_file())
    except OSError:
        return False


def _mentions(path: str, needle: bytes) -> bool:
    with open(path, "rb") as f:
        tail = b""
        while chunk := f.read(1 << 22):
            if needle in tail + chunk:
                return True
            tail = chunk[-len(needle) :]
    return False


def _claude_hooks(target: Target) -> tuple[Wanted, ...]:
    def handler(event: str, timeout: int = POST_TIMEOUT_S) -> dict[str, Any]:
        blocking = event == "PreToolUse"
        if target.hook_type == "mcp_tool":
            h: dict[str, Any] = {"type": "mcp_tool", "server": MCP_SERVER, "tool": MCP_HOOK_TOOL}
            h["input"] = mcp_tool_input()
        elif target.server is not None or target.hook_url is not None:
            h = _claude_http(target)
        else:
            h = {"type": "command", "command": hook_command("claude-code", target, event)}
        h["timeout"] = PRE_TIMEOUT_S if blocking else timeout
        if blocking:
            h["onFailure"] = "block"  # a hook that cannot start, times out or answers oddly refuses the call
        return h

    wanted = (
        Wanted("PreToolUse", "^(Edit|MultiEdit|Write|Bash)$", handler("PreToolUse")),
        Wanted("PostToolUse", "^(Read|Edit|MultiEdit|Write|Bash)$", handler("PostToolUse")),
        Wanted("PostToolUseFailure", "^(Edit|MultiEdit|Write|Bash)$", handler("PostToolUseFailure")),
        Wanted("Stop", None, handler("Stop")),
        Wanted("SubagentStop", None, handler("SubagentStop")),  # a subagent is a session of its own: its end too
        Wanted("SessionEnd", None, handler("SessionEnd", SESSION_END_TIMEOUT_S)),
    )
    if target.hook_url is None or target.server is not None:
        return wanted

    # http hooks cannot start the hook service: a session's start and each prompt run the fast client,
    # which starts it (and names the agent's process, whose life keeps it up: server/hooks.py).
    def starter(event: str) -> dict[str, Any]:  # its own event's name in the failure log's line
        return {"type": "command", "command": hook_command("claude-code", target, event), "timeout": POST_TIMEOUT_S}

    return (
        Wanted("SessionStart", None, starter("SessionStart")),
        Wanted("UserPromptSubmit", None, starter("UserPromptSubmit")),
        *wanted,
    )


def _claude_http(target: Target) -> dict[str, Any]:
    """A Claude Code http handler: to a service named by --http (its bearer token from the variable
    `token_env`), or to the repository's hook service on its loopback port (with its key)."""
    from coordinator.agents.core import FORWARDED_ENV, HOOK_KEY_HEADER, env_header

    if target.server is not None:
        base, auth = target.server, {"Authorization": f"Bearer ${target.token_env}"}
        allowed = [target.token_env, *FORWARDED_ENV]
    else:
        base, auth, allowed = str(target.hook_url), {HOOK_KEY_HEADER: str(target.hook_key)}, [*FORWARDED_ENV]
    return {
        "type": "http",
        "url": f"{base}/v1/hooks/claude-code",
        # the session's own settings travel with each event (coordinator.agents.core.FORWARDED_ENV)
        "headers": auth | {env_header(name): f"${name}" for name in FORWARDED_ENV},
        "allowedEnvVars": allowed,
    }


def _codex_hooks(target: Target) -> tuple[Wanted, ...]:
    def handler(event: str, timeout: int, status: str | None = None) -> dict[str, Any]:
        h: dict[str, Any] = {"type": "command", "command": hook_command("codex", target, event), "timeout": timeout}
        if status:
            h["statusMessage"] = status
        return h

    return (
        Wanted(
            "PreToolUse", "^(apply_patch|Bash)$", handler("PreToolUse", PRE_TIMEOUT_S, "edit-coordinator: checking")
        ),
        Wanted("PostToolUse", "^(apply_patch|Bash)$", handler("PostToolUse", POST_TIMEOUT_S)),
        Wanted("UserPromptSubmit", None, handler("UserPromptSubmit", POST_TIMEOUT_S)),  # notes kept at Stop
        Wanted("Stop", None, handler("Stop", POST_TIMEOUT_S)),
        Wanted("SessionEnd", None, handler("SessionEnd", SESSION_END_TIMEOUT_S)),
    )


def _gemini_hooks(target: Target) -> tuple[Wanted, ...]:
    def handler(event: str, timeout_s: int, description: str) -> dict[str, Any]:
        return {
            "name": GEMINI_NAME,
            "type": "command",
            "command": hook_command("gemini", target, event),
            "timeout": timeout_s * 1000,  # Gemini CLI counts milliseconds
            "description": description,
        }

    return (
        Wanted(
            "BeforeTool",
            "^(write_file|replace|run_shell_command)$",
            handler(
                "BeforeTool", PRE_TIMEOUT_S, "edit-coordinator: refuse stale or unread writes, take the write ticket"
            ),
        ),
        Wanted(
            "AfterTool",
            "^(read_file|write_file|replace)$",
            handler("AfterTool", POST_TIMEOUT_S, "edit-coordinator: record what was read or written"),
        ),
        Wanted(
            "BeforeAgent",
            None,
            handler("BeforeAgent", POST_TIMEOUT_S, "edit-coordinator: what the last turn left to tell"),
        ),
        Wanted("AfterAgent", None, handler("AfterAgent", POST_TIMEOUT_S, "edit-coordinator: end of turn")),
        Wanted("SessionEnd", None, handler("SessionEnd", SESSION_END_TIMEOUT_S, "edit-coordinator: end of session")),
    )


def mcp_tool_input() -> dict[str, str]:
    """The `input` of our mcp_tool handlers: each field of the hook event the `hook` tool reads, as the
    hook's `${path}` substitution of it (coordinator.agents.claude_code.MCP_TOOL_FIELDS)."""
    from coordinator.agents.claude_code import MCP_TOOL_FIELDS

    return {name: "${" + path + "}" for name, path in MCP_TOOL_FIELDS.items()}


def is_fast(handler: Any) -> bool:
    """A command handler of ours that runs the fast client (coordinator/cli/hookclient.py); False for the
    `edit-coordinator hook AGENT` form earlier versions wrote (a process that loads more per call)."""
    command = handler.get("command") if isinstance(handler, dict) else None
    return isinstance(command, str) and _FAST_COMMAND.search(command) is not None


def is_ours(handler: Any, agent: str) -> bool:
    """A handler `init` wrote for `agent`: it runs `edit-coordinator hook AGENT` (console script or
    `python -m coordinator.cli`) or the fast client `.../coordinator/cli/hookclient.py AGENT`, or posts to a
    serve's `/v1/hooks/AGENT`."""
    if not isinstance(handler, dict):
        return False
    if handler.get("type") == "mcp_tool":
        return agent == "claude-code" and (handler.get("server"), handler.get("tool")) == (MCP_SERVER, MCP_HOOK_TOOL)
    command = handler.get("command")
    if isinstance(command, str):
        m = _OUR_COMMAND.search(command)
        if m is not None and m.group(1) == agent:
            return True
    url = handler.get("url")
    if isinstance(url, str):
        m = _OUR_URL.search(url)
        return m is not None and m.group(1) == agent
    return False


# -- checking the settings' shape -----------------------------------------------------------------------------


def parse(text: str, where: str, events: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The settings in `text` (a file's content; empty means none yet). Raises `invalid_argument` for what
    a merge could not keep intact: not JSON (comments included), duplicate keys, not an object."""
    if not text.strip():
        return {}

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise _malformed(where, f"the key {key!r} appears twice in one object")
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise _malformed(where, f"it is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise _malformed(where, f"its top level is a {type(data).__name__}, not an object")
    check_shape(data, where, events)
    return data


def check_shape(settings: dict[str, Any], where: str, events: frozenset[str] = frozenset()) -> None:
    """Raises `invalid_argument` when a part `init` writes into has a type the agent would not accept.
    Other keys under "hooks" are left alone whatever they hold (Gemini CLI keeps "enabled" and "disabled"
    there beside the events)."""
    hooks = settings.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise _malformed(where, '"hooks" is not an object')
    for event, groups in (hooks or {}).items():
        if not isinstance(groups, list):
            if event in events:
                raise _malformed(where, f'"hooks.{event}" is not a list of matcher groups')
            continue
        for i, group in enumerate(groups):
            if event in events and (not isinstance(group, dict) or not isinstance(group.get("hooks", []), list)):
                raise _malformed(where, f'"hooks.{event}[{i}]" is not a matcher group with a "hooks" list')
    permissions = settings.get("permissions")
    if permissions is not None:
        if not isinstance(permissions, dict):
            raise _malformed(where, '"permissions" is not an object')
        deny = permissions.get("deny")
        if deny is not None and not isinstance(deny, list):
            raise _malformed(where, '"permissions.deny" is not a list')


def _malformed(where: str, what: str) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.INVALID_ARGUMENT,
        f"The settings file {where} cannot be merged into: {what}. Nothing was written. Fix the file (or move it "
        "aside), then run the command again.",
        path=where,
        reason="settings_malformed",
    )


# -- merge, check, remove -------------------------------------------------------------------------------------


def _groups(settings: dict[str, Any], event: str) -> list[Any]:
    hooks = settings.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    return groups if isinstance(groups, list) else []


def _entries(settings: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], int, Any]]:
    """Every handler: (event, its group, its index in the group, the handler)."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            continue
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                for i, handler in enumerate(group["hooks"]):
                    yield event, group, i, handler


def describe(w: Wanted) -> str:
    return f"{w.event} hook" + (f" for {w.matcher}" if w.matcher else "")


def merge(settings: dict[str, Any], p: Plan) -> tuple[dict[str, Any], Changes, Manifest]:
    """`settings` with the plan's hooks and deny rules in, and nothing of anyone else's changed. Our handlers
    that are already in place stay where they are; ours that the plan no longer wants (an older version's,
    or a command path that moved) are replaced."""
    out = copy.deepcopy(settings)
    changes, manifest = Changes(), Manifest()
    in_place = _keep_wanted(out, p, changes)
    for w in p.hooks:
        if describe(w) in in_place:
            continue
        group: dict[str, Any] = {"matcher": w.matcher} if w.matcher is not None else {}
        group["hooks"] = [copy.deepcopy(w.handler)]
        hooks = _container(out, "hooks", dict, manifest)
        if w.event not in hooks:
            manifest.created.append(f"hooks.{w.event}")
            hooks[w.event] = []
        hooks[w.event].append(group)
        (changes.updated if describe(w) in changes.removed else changes.added).append(describe(w))
    changes.removed = [r for r in changes.removed if r not in changes.updated]
    if p.deny:
        permissions = _container(out, "permissions", dict, manifest)
        if "deny" not in permissions:
            manifest.created.append("permissions.deny")
            permissions["deny"] = []
        for rule in p.deny:
            if rule not in permissions["deny"]:
                permissions["deny"].append(rule)
                manifest.deny_added.append(rule)
                changes.added.append(f"deny rule {rule}")
    for name, value in p.env:
        env = _container(out, "env", dict, manifest)
        if name not in env:  # the user's own value of it stays
            env[name] = value
            manifest.created.append(f"env.{name}")
            changes.added.append(f"env {name}={value}")
    return out, changes, manifest


def _container(out: dict[str, Any], key: str, kind: type, manifest: Manifest) -> Any:
    if key not in out:
        manifest.created.append(key)
        out[key] = kind()
    return out[key]


def _keep_wanted(out: dict[str, Any], p: Plan, changes: Changes) -> set[str]:
    """Drops our handlers the plan does not want (and a group they leave empty); returns the wanted ones
    found in place, each kept once (a duplicate of ours goes too)."""
    wanted = {(w.event, w.matcher, _key(w.handler)): describe(w) for w in p.hooks}
    kept: set[str] = set()
    emptied: list[int] = []
    for event, group, _, handler in list(_entries(out)):
        if not is_ours(handler, p.agent):
            continue
        name = wanted.get((event, group.get("matcher"), _key(handler)))
        if name is not None and name not in kept:
            kept.add(name)
            continue
        group["hooks"] = [h for h in group["hooks"] if h is not handler]
        changes.removed.append(describe(Wanted(event, group.get("matcher"), {})))
        if not group["hooks"]:
            emptied.append(id(group))
    if emptied:
        hooks = out["hooks"]
        for event, groups in hooks.items():
            if isinstance(groups, list):
                hooks[event] = [g for g in groups if id(g) not in emptied]
    return kept


def _key(handler: Any) -> str:
    return json.dumps(handler, sort_keys=True)


def missing(settings: dict[str, Any], p: Plan) -> list[str]:
    """What `init` would still add: each wanted handler not in place as it would write it, each deny rule
    absent."""
    present = {
        (event, group.get("matcher"), _key(handler))
        for event, group, _, handler in _entries(settings)
        if is_ours(handler, p.agent)
    }
    out = [describe(w) for w in p.hooks if (w.event, w.matcher, _key(w.handler)) not in present]
    permissions = settings.get("permissions")
    deny = permissions.get("deny") if isinstance(permissions, dict) else None
    out += [f"deny rule {r}" for r in p.deny if not (isinstance(deny, list) and r in deny)]
    env = settings.get("env")
    out += [f"env {k}={v}" for k, v in p.env if not (isinstance(env, dict) and k in env)]
    return out


def unwanted(settings: dict[str, Any], p: Plan) -> list[str]:
    """Our handlers in place that the plan would not write as they are (an older version's, other options)."""
    wanted = {(w.event, w.matcher, _key(w.handler)) for w in p.hooks}
    return [describe(Wanted(e, m, {})) for e, m, h in ours(settings, p.agent) if (e, m, _key(h)) not in wanted]


def ours(settings: dict[str, Any], agent: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Our handlers in place: (event, matcher, handler)."""
    return [(e, g.get("matcher"), h) for e, g, _, h in _entries(settings) if is_ours(h, agent)]


def remove(settings: dict[str, Any], agent: str, manifest: Manifest | None) -> tuple[dict[str, Any], Changes]:
    """`settings` without our handlers, without the deny rules the manifest says `init` added, and without
    the containers it made that are now empty. Without a manifest, deny rules stay (they may be the user's)."""
    out = copy.deepcopy(settings)
    changes = Changes()
    hooks = out.get("hooks")
    if isinstance(hooks, dict):
        for event, groups in list(hooks.items()):
            if not isinstance(groups, list):
                continue
            kept_groups = []
            for group in groups:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                if not isinstance(handlers, list) or not any(is_ours(h, agent) for h in handlers):
                    kept_groups.append(group)
                    continue
                changes.removed.append(describe(Wanted(event, group.get("matcher"), {})))
                group["hooks"] = [h for h in handlers if not is_ours(h, agent)]
                if group["hooks"]:
                    kept_groups.append(group)
            hooks[event] = kept_groups
    permissions = out.get("permissions")
    if manifest is not None and isinstance(permissions, dict) and isinstance(permissions.get("deny"), list):
        for rule in manifest.deny_added:
            if rule in permissions["deny"]:
                permissions["deny"].remove(rule)
                changes.removed.append(f"deny rule {rule}")
    created = manifest.created if manifest is not None else None
    _remove_env(out, created, changes)
    _drop_empty(out, created)
    return out, changes


def _remove_env(out: dict[str, Any], created: list[str] | None, changes: Changes) -> None:
    """The variables `init` put in `env` (as its record says), and `env` itself if it made it and it is empty."""
    env = out.get("env")
    if created is None or not isinstance(env, dict):
        return
    for name in [x.removeprefix("env.") for x in created if x.startswith("env.")]:
        if env.pop(name, None) is not None:
            changes.removed.append(f"env {name}")
    if not env and "env" in created:
        del out["env"]


def _drop_empty(out: dict[str, Any], created: list[str] | None) -> None:
    """Deletes the empty event lists and containers that `init` made (all empty ones of those we touch when
    no record says which it made)."""

    def ours_to_drop(path: str) -> bool:
        return created is None or path in created

    hooks = out.get("hooks")
    if isinstance(hooks, dict):
        for event in [e for e, g in hooks.items() if g == [] and ours_to_drop(f"hooks.{e}")]:
            del hooks[event]
        if not hooks and ours_to_drop("hooks"):
            del out["hooks"]
    permissions = out.get("permissions")
    if isinstance(permissions, dict):
        if permissions.get("deny") == [] and ours_to_drop("permissions.deny"):
            del permissions["deny"]
        if not permissions and ours_to_drop("permissions"):
            del out["permissions"]


def render(settings: dict[str, Any], indent: int | str = 2) -> str:
    return json.dumps(settings, indent=indent, ensure_ascii=False) + "\n"


def indent_of(text: str) -> int | str:
    """The indentation the file uses (its first indented line's), so that a merge rewrites as little of it
    as it can: 2 for a new or flat file."""
    m = re.search(r"^([ \t]+)\S", text, re.MULTILINE)
    if m is None:
        return 2
    lead = m.group(1)
    return lead if "\t" in lead else len(lead)


def program_of(handler: dict[str, Any]) -> str | None:
    """The executable our command handler starts (its first word after any VAR=value), for --check."""
    command = handler.get("command")
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    words = [w for w in words if not _is_assignment(w)]
    return words[0] if words else None


def client_script_of(handler: dict[str, Any]) -> str | None:
    """The fast client's script our command handler runs (.../coordinator/cli/hookclient.py), for --check."""
    command = handler.get("command")
    try:
        words = shlex.split(command) if isinstance(command, str) else []
    except ValueError:
        return None
    return next((w for w in words if w.endswith("/coordinator/cli/hookclient.py")), None)


def _is_assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and _ENV_NAME.fullmatch(name) is not None


def valid_env_name(name: str) -> bool:
    return _ENV_NAME.fullmatch(name) is not None


# -- file I/O ---------------------------------------------------------------------------------------------------


def load(path: Path, where: str, events: frozenset[str] = frozenset()) -> tuple[dict[str, Any], bool]:
    """The settings at `path` and whether the file exists. Raises `invalid_argument` for an unreadable or
    malformed file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, False
    except IsADirectoryError:
        raise _malformed(where, "it is a folder") from None
    except OSError as exc:
        raise CoordinatorError(
            ErrorCode.IO_ERROR, f"The settings file {where} could not be read ({exc.strerror}). Nothing was written."
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _malformed(where, "it is not UTF-8 text") from None
    return parse(text, where, events), True


def save(path: Path, text: str) -> None:
    """Replaces `path` (its target, if it is a symlink) in one step: a temporary file in the same folder,
    written, flushed to disk, then renamed over it. The file's mode is kept."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
