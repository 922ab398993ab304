"""`edit-coordinator init claude-code|codex|gemini [--check|--remove]`: write the agent's hooks into its
settings in the repository, report what is missing, or take them out again. The merge rules are
coordinator.agents.settings'; this module finds the files, prints and keeps the record of what it added."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from coordinator.cli import common as cmd_common

_NAMES = {"claude-code": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI"}
_NEXT = {
    "claude-code": "Start Claude Code in the repository; `/hooks` lists the hooks it loaded.",
    "codex": "Start Codex in the repository, trust the project and review the new hooks in `/hooks` (Codex "
    "skips hooks it has not been told to trust).",
    "gemini": "Start Gemini CLI in the repository; `/hooks panel` lists the hooks it loaded (the hooks system "
    "must be enabled: `/settings`, Advanced).",
}


def register(sub: Any) -> None:
    from coordinator.agents.settings import AGENTS, TOKEN_ENV_DEFAULT

    p = sub.add_parser(
        "init",
        help="guard an agent's own file tools: write its hooks (claude-code, codex, gemini)",
        description=(
            "Write the hooks that put an agent's own Read/Edit/Write (and shell) calls through the coordinator "
            "into its settings in this repository, merged into what is there: other hooks, permissions and "
            "unknown keys are kept, and a second run adds nothing. Claude Code: .claude/settings.local.json "
            "(this machine's; --scope project writes the shared .claude/settings.json), plus a deny rule for "
            "NotebookEdit (Read shows a notebook's cells, not its bytes, so its edits cannot be judged). "
            "Codex: .codex/hooks.json. Gemini CLI: .gemini/settings.json. "
            "--check reports what is missing (exit 1 if anything is); --remove takes out what init added."
        ),
        formatter_class=cmd_common.DefaultsFormatter,
    )
    p.add_argument("agent", choices=AGENTS, help="the agent whose settings to write")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report what is missing; change nothing")
    mode.add_argument("--remove", action="store_true", help="take out what init added")
    p.add_argument(
        "--scope",
        choices=("local", "project"),
        default="local",
        help="claude-code only: local = .claude/settings.local.json (not committed), project = .claude/settings.json",
    )
    p.add_argument(
        "--http",
        metavar="URL",
        default=None,
        help="a running `edit-coordinator serve` (base URL) to send the hook calls to, instead of the root's "
        "embedded default; Claude Code then uses its http hook type",
    )
    p.add_argument(
        "--hook-type",
        choices=("http", "command", "mcp_tool"),
        default=None,
        help="claude-code only: http = Claude Code posts each event to the repository's hook service on a "
        "loopback port, no process per event (the default with --scope local; SessionStart and "
        "UserPromptSubmit stay command hooks, which start the service); command = a process per hook event "
        "(the fast client to the hook service; the default with --scope project, whose settings are "
        "shared: the http hooks' key is this machine's); mcp_tool = the `hook` tool of the MCP server "
        "`edit-coordinator` (started with --hook-tool), Claude Code 2.1.118 and later",
    )
    p.add_argument(
        "--token-env",
        metavar="VAR",
        default=TOKEN_ENV_DEFAULT,
        help="with --http: the environment variable holding the bearer token (an admin token: the hooks act "
        "for every session); the settings name the variable, never the token",
    )
    p.add_argument(
        "--subfolders",
        action="store_true",
        help="gemini only: also write (check, remove) a guard into the user's ~/.gemini/settings.json that "
        "refuses a write of Gemini CLI started in a subfolder of a hooked repository, where it loads none of "
        "the repository's hooks",
    )
    cmd_common.add_common(p, redis=False)
    p.set_defaults(func=cmd_common.guarded(cmd_init))


def cmd_init(args: argparse.Namespace) -> int:
    if not getattr(args, "subfolders", False):
        return _init(args)
    from coordinator.cli import gemini_subfolders
    from coordinator.errors import CoordinatorError, ErrorCode

    if args.agent != "gemini":
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "--subfolders writes a guard into Gemini CLI's user settings: use it with `init gemini` (Claude "
            "Code and Codex find the repository's settings from any subfolder).",
        )
    status = _init(args)
    code, lines = gemini_subfolders.apply("check" if args.check else "remove" if args.remove else "init")
    for line in lines:
        print(line, file=sys.stderr if args.json else sys.stdout)
    return max(status, code)


def _init(args: argparse.Namespace) -> int:
    from coordinator.agents import settings as st

    root = Path(cmd_common.real_root(args.root))
    target = _target(args, root)
    plan = st.plan(args.agent, target, args.scope)
    path = root / plan.path
    current, exists = st.load(path, plan.path, plan.events)
    if args.check:
        return _check(args, root, plan, current, exists)
    record = _record_path(root, args.agent, args.scope)
    if args.remove:
        return _remove(args, root, plan, current, exists, record)
    merged, changes, manifest = st.merge(current, plan)
    manifest.created_file = not exists
    if changes.any:
        earlier = _load_record(record) if exists else st.Manifest()
        text = st.render(merged, _indent(path))
        manifest.before = st.text_before(earlier, _text(path), current, args.agent)
        manifest.after = st.fingerprint(text)
        _save_record(record, earlier.joined(manifest))
        st.save(path, text)
    report = {
        "agent": args.agent,
        "settings": plan.path,
        "added": changes.added,
        "updated": changes.updated,
        "removed": changes.removed,
        "command": _shown_handler(plan),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    name = _NAMES[args.agent]
    if not changes.any:
        print(f"{name}: {plan.path} already has every hook; nothing changed.")
    else:
        print(f"{name}: wrote {plan.path}")
        for verb in ("added", "updated", "removed"):
            for item in report[verb]:
                print(f"  {verb}: {item}")
    print(f"  the hooks run: {report['command']}")
    for warning in _warnings(root, plan, merged):
        print(f"  note: {warning}")
    if target.hook_type == "mcp_tool":
        print(f"  note: {_MCP_SERVER_NOTE.format(program=_mcp_program(root))}")
    print(_NEXT[args.agent])
    return 0


def _target(args: argparse.Namespace, root: Path) -> Any:
    from coordinator.agents.settings import Target, valid_env_name
    from coordinator.errors import CoordinatorError, ErrorCode

    hook_type = _hook_type(args)
    if hook_type == "mcp_tool" and (args.agent != "claude-code" or args.http is not None):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "--hook-type mcp_tool is Claude Code's, and goes to its MCP server rather than to a service: use it "
            "with `init claude-code` and without --http.",
        )
    server = None
    if args.http is not None:
        server = args.http.rstrip("/")
        if not server.startswith(("http://", "https://")) or any(c.isspace() or c in "\"'\\$`" for c in server):
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"--http {args.http!r} is not a service URL: give the base URL of a running `edit-coordinator "
                "serve`, such as http://127.0.0.1:8765.",
            )
    if not valid_env_name(args.token_env):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"--token-env {args.token_env!r} is not an environment variable name (letters, digits, _).",
        )
    endpoint = None
    if hook_type == "http" and server is None:
        from coordinator.cli.hookservice import HookHttp, http_endpoint

        endpoint = http_endpoint(root, create=not (args.check or args.remove)) or HookHttp(0, "")
    return Target(
        program=_program(),
        server=server,
        token_env=args.token_env,
        hook_type=hook_type,
        client=_client(),
        root=str(root),
        hook_url=endpoint.url if endpoint is not None else None,
        hook_key=endpoint.key if endpoint is not None else None,
    )


def _hook_type(args: argparse.Namespace) -> str:
    """--hook-type, or its default: Claude Code's http hooks into the repository's hook service where the
    settings are this machine's own (--scope local: they hold the key), command hooks elsewhere."""
    from coordinator.errors import CoordinatorError, ErrorCode

    chosen: str | None = getattr(args, "hook_type", None)
    if chosen is None:
        local = args.agent == "claude-code" and getattr(args, "scope", "local") == "local"
        return "http" if local and args.http is None else "command"
    if chosen == "http" and (args.agent != "claude-code" or getattr(args, "scope", "local") != "local"):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "--hook-type http is Claude Code's, with --scope local: its settings hold the key of this machine's "
            "hook service, which a shared .claude/settings.json must not. Use --hook-type command there.",
        )
    return chosen


_MCP_SERVER_NOTE = (
    "the hooks call the tool `hook` of the MCP server `edit-coordinator`, which must be registered with "
    "--hook-tool: claude mcp add edit-coordinator -- {program}"
)


def _mcp_program(root: Path) -> str:
    import shlex

    argv = [*_program(), "mcp", "--root", str(root), "--hook-tool"]
    return " ".join(shlex.quote(a) for a in argv)


def _program() -> tuple[str, ...]:
    """This installation's CLI by absolute path (coordinator.git.guard.cli_argv: the git guard's advice names
    the same): a shim or PATH lookup would cost time on every call, or find another one."""
    from coordinator.git.guard import cli_argv

    return cli_argv()


def _client() -> tuple[str, ...]:
    """The fast client's argv (coordinator/cli/hookclient.py): this interpreter by the path it was started
    by (a venv's own, not resolved: -S skips `site`, and the venv is found from that path when the slow path
    runs it), isolated (-I: no PYTHON* variables, no current folder on the path) and without `site` (-S)."""
    return (sys.executable, "-I", "-S", str(Path(__file__).resolve().with_name("hookclient.py")))


def _shown_handler(plan: Any) -> str:
    by_type = {w.handler.get("type"): w for w in reversed(plan.hooks)}
    if "mcp_tool" in by_type:
        handler = by_type["mcp_tool"].handler
        return f"the MCP tool {handler['tool']} of the server {handler['server']}"
    if "http" not in by_type:
        return str(plan.hooks[0].handler.get("command"))
    shown = f"POST {by_type['http'].handler.get('url')}"
    if "command" in by_type:  # the http hooks' service is started by command hooks
        starters = " and ".join(w.event for w in plan.hooks if w.handler.get("type") == "command")
        shown += f" (at {starters}, which start the hook service: {by_type['command'].handler['command']})"
    return shown


def _check(args: argparse.Namespace, root: Path, plan: Any, current: dict[str, Any], exists: bool) -> int:
    from coordinator.agents import failures
    from coordinator.agents import settings as st

    missing = st.missing(current, plan) if exists else [st.describe(w) for w in plan.hooks]
    if not exists:
        missing += [f"deny rule {r}" for r in plan.deny]
    problems = [*_broken_programs(current, plan.agent), *_disabled(root, plan.agent, current)]
    if plan.agent == "codex" and exists:
        from coordinator.cli import codex_trust

        untrusted, trust_notes = codex_trust.problems(root, lambda command: st.is_ours({"command": command}, "codex"))
        problems += untrusted
    target = _target(args, root)
    notes = [*_old_commands(current, plan.agent), *_warnings(root, plan, current)]
    if plan.agent == "codex" and exists:
        notes += trust_notes
    if target.server is not None:
        problems += _unreachable(target.server)
        if not os.environ.get(target.token_env):
            notes.append(f"${target.token_env} is not set here: the agent must be started where it holds the token")
    if target.hook_type == "mcp_tool":  # where Claude Code keeps its MCP servers is outside what init reads
        notes.append(_MCP_SERVER_NOTE.format(program=_mcp_program(root)))
    stale = st.unwanted(current, plan)
    logged = failures.summary(root, agent=plan.agent)
    report = {"settings": plan.path, "missing": missing, "problems": problems, "stale": stale, "notes": notes}
    if args.json:
        report["failures"] = failures.recent(root, 0, plan.agent)[0]
        print(json.dumps(report, indent=2))
    else:
        _print_check(plan, report, logged)
    return 1 if missing or problems else 0


def _print_check(plan: Any, report: dict[str, list[str]], logged: list[str]) -> None:
    if not report["missing"] and not report["problems"]:
        print(f"{_NAMES[plan.agent]}: every hook is in place in {plan.path}.")
    for item in report["missing"]:
        print(f"missing: {item}")
    for item in report["stale"]:
        print(f"differs from what init writes now: {item} (init replaces it)")
    for item in report["problems"]:
        print(f"problem: {item}")
    for warning in report["notes"]:
        print(f"note: {warning}")
    for text in logged:
        print(text)
    if report["missing"] or report["stale"]:
        print(f"Run `edit-coordinator init {plan.agent}` (with the same options) to put it right.")


def _remove(
    args: argparse.Namespace, root: Path, plan: Any, current: dict[str, Any], exists: bool, record: Path
) -> int:
    """Take out what init added, and stop what the hooks started (the hook service, the embedded Redis)."""
    from coordinator.agents import settings as st

    path = root / plan.path
    name = _NAMES[plan.agent]
    if not exists:
        print(f"{name}: there is no {plan.path}; nothing to remove.")
        return 0
    manifest = _load_record(record) if record.is_file() else None
    cleaned, changes = st.remove(current, plan.agent, manifest)
    if changes.any:
        if not cleaned and manifest is not None and manifest.created_file:
            path.unlink()
            with contextlib.suppress(OSError):  # its folder (.claude/, .codex/, .gemini/) if init left it empty
                path.parent.rmdir()
        else:  # the user's own text when the file is still what init wrote, else the parsed file re-written
            before = manifest.restores(_text(path)) if manifest is not None else None
            st.save(path, before if before is not None else st.render(cleaned, _indent(path)))
    record.unlink(missing_ok=True)
    from coordinator.cli.hookservice import stop_all

    stopped = stop_all(root)
    if args.json:
        print(json.dumps({"settings": plan.path, "removed": changes.removed, "stopped": stopped}, indent=2))
        return 0
    if stopped:
        print(f"{name}: stopped {' and '.join(stopped)} (they start again on demand)")
    if not changes.any:
        print(f"{name}: {plan.path} holds nothing of edit-coordinator's; nothing changed.")
        return 0
    print(f"{name}: removed from {plan.path}" + ("" if path.exists() else " (the file, which init had made)"))
    for item in changes.removed:
        print(f"  removed: {item}")
    if manifest is None and plan.deny:
        print(f"  kept: the deny rules ({', '.join(plan.deny)}): no record says init added them")
    return 0


def _text(path: Path) -> str | None:
    """The file's exact text (no newline translation), None when there is none or it cannot be read."""
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _indent(path: Path) -> int | str:
    from coordinator.agents.settings import indent_of

    try:
        return indent_of(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError):
        return 2


def _broken_programs(current: dict[str, Any], agent: str) -> list[str]:
    from coordinator.agents import settings as st

    out = []
    for program in sorted({p for _, _, h in st.ours(current, agent) if (p := st.program_of(h))}):
        if os.path.isabs(program) and not os.access(program, os.X_OK):
            out.append(
                f"the hooks run {program}, which is not an executable here: every call would be refused "
                "(the `|| exit 2` guard), so rerun init"
            )
        elif not os.path.isabs(program) and shutil.which(program) is None:
            out.append(f"the hooks run {program}, which is not on PATH here")
    for script in sorted({s for _, _, h in st.ours(current, agent) if (s := st.client_script_of(h))}):
        if not os.path.isfile(script):
            out.append(
                f"the hooks run the script {script}, which is not here (the package moved or was removed): every "
                "call would be refused (the `|| exit 2` guard), so rerun init"
            )
    return out


def _old_commands(current: dict[str, Any], agent: str) -> list[str]:
    """Our command handlers that run the `edit-coordinator hook AGENT` command of an earlier version rather
    than the fast client: they still guard, at several times the fast client's start per tool call."""
    from coordinator.agents import settings as st

    old = [h for _, _, h in st.ours(current, agent) if isinstance(h.get("command"), str) and not st.is_fast(h)]
    if not old or any("--server" in str(h["command"]) for h in old):
        return []
    return [
        f"{len(old)} hook(s) run `edit-coordinator hook {agent}`, the command an earlier version wrote (it loads "
        "the command line on every tool call); rerun init to write the fast client (coordinator/cli/hookclient.py)"
    ]


def _unreachable(server: str) -> list[str]:
    """The service's health route, asked once (no token needed): a hook sent to a service that does not
    answer is refused (or, where the agent lets hook failures through, not checked at all)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{server}/v1/health", timeout=3) as resp:  # _target allows http(s) only
            if resp.status == 200:
                return []
            status = str(resp.status)
    except urllib.error.HTTPError as exc:
        status = str(exc.code)
    except (OSError, ValueError) as exc:
        status = f"no answer: {getattr(exc, 'reason', exc)}"
    return [f"the service at {server} is not answering its health check ({status}): start `edit-coordinator serve`"]


def _disabled(root: Path, agent: str, current: dict[str, Any]) -> list[str]:
    """Switches that turn the agent's hooks off altogether, where the repository's own files say so."""
    out = []
    if agent == "claude-code" and current.get("disableAllHooks") is True:
        out.append('"disableAllHooks": true in the settings turns every hook off')
    if agent == "gemini":
        tools = current.get("tools")
        hooks = current.get("hooks")
        config = current.get("hooksConfig")
        if (
            (isinstance(tools, dict) and tools.get("enableHooks") is False)
            or (isinstance(hooks, dict) and hooks.get("enabled") is False)
            or (isinstance(config, dict) and config.get("enabled") is False)
        ):
            out.append("the settings turn Gemini CLI's hooks system off")
        if isinstance(hooks, dict) and "edit-coordinator" in (hooks.get("disabled") or []):
            out.append('"hooks.disabled" names edit-coordinator')
    if agent == "codex":
        import tomllib

        try:
            codex_config = tomllib.loads((root / ".codex" / "config.toml").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            codex_config = {}
        features = codex_config.get("features")
        if isinstance(features, dict) and False in (features.get("hooks"), features.get("codex_hooks")):
            out.append(".codex/config.toml turns Codex's hooks off ([features] hooks = false)")
    return out


def _warnings(root: Path, plan: Any, current: dict[str, Any]) -> list[str]:
    from coordinator.agents import settings as st
    from coordinator.errors import CoordinatorError

    out = []
    if plan.agent == "gemini":
        if not _gemini_subfolder_guard():
            out.append(_GEMINI_SUBFOLDER_NOTE.format(root=root))
        untrusted = gemini_trust(root)
        if untrusted:
            out.append(untrusted)
    if not _git_ignored(root, plan.path):  # every agent's: .codex/ and .gemini/ settings are usually committed
        keyed = any(w.handler.get("type") == "http" and w.handler.get("url", "").startswith("http://127.0.0.1:")
                    for w in plan.hooks)  # fmt: skip
        holds = "the key of its hook service, " if keyed else ""
        out.append(
            f"{plan.path} names {holds}this machine's interpreter and repository path: add it to .gitignore so "
            "that it is not committed"
        )
    if plan.agent == "claude-code":
        other = ".claude/settings.json" if plan.path.endswith("settings.local.json") else ".claude/settings.local.json"
        try:
            theirs, _ = st.load(root / other, other, plan.events)
        except CoordinatorError:
            theirs = {}  # only a hint here; `init --check --scope ...` on that file says what is wrong with it
        if st.ours(theirs, plan.agent):
            out.append(f"{other} holds edit-coordinator hooks too: Claude Code would run both; remove one")
    return out


_GEMINI_SUBFOLDER_NOTE = (
    "start Gemini CLI at the repository's top ({root}): started from a subfolder it loads no "
    ".gemini/settings.json of the repository, so no hook runs and nothing says so (`init gemini "
    "--subfolders` adds a guard to ~/.gemini/settings.json that refuses its writes there)"
)


def _gemini_subfolder_guard() -> bool:
    """Whether the user's Gemini CLI settings hold the subfolder guard (`init gemini --subfolders`)."""
    from coordinator.agents import settings as st
    from coordinator.cli import gemini_subfolders
    from coordinator.errors import CoordinatorError

    path = gemini_subfolders.user_settings()
    try:
        return gemini_subfolders.present(st.load(path, str(path))[0])
    except CoordinatorError:
        return False


def gemini_trust(root: Path, home: Path | None = None) -> str | None:
    """Why Gemini CLI would not trust `root` (None: it does, or trust is switched off): it runs only in a
    trusted folder (else `-p` exits 55, and a session loads no project settings, hooks included). The rule
    of ~/.gemini/trustedFolders.json: the nearest entry at or above the folder decides; TRUST_FOLDER trusts
    that folder and below, TRUST_PARENT its parent and below, DO_NOT_TRUST refuses."""
    home = home if home is not None else Path.home()
    try:
        user = json.loads((home / ".gemini" / "settings.json").read_text(encoding="utf-8"))
        security = user.get("security", {}) if isinstance(user, dict) else {}
        if security.get("folderTrust", {}).get("enabled") is False:
            return None
    except (OSError, ValueError, AttributeError):
        pass
    where = home / ".gemini" / "trustedFolders.json"
    try:
        rules = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        rules = {}
    best: tuple[int, str] | None = None
    for path, level in rules.items() if isinstance(rules, dict) else ():
        folder = os.path.dirname(path) if level == "TRUST_PARENT" else path
        folder = os.path.realpath(folder)
        covers = str(root) == folder or str(root).startswith(folder.rstrip("/") + "/")
        if covers and (best is None or len(folder) > best[0]):
            best = (len(folder), str(level))
    if best is not None and best[1] in ("TRUST_FOLDER", "TRUST_PARENT"):
        return None
    said = "refuses it (DO_NOT_TRUST)" if best is not None else "does not name it"
    return (
        f"Gemini CLI does not trust {root}: {where} {said}, and in an untrusted folder Gemini CLI loads no "
        f"project settings (no hooks; with -p it exits 55). Trust it: start gemini there and accept, or add "
        f'"{root}": "TRUST_FOLDER" to {where}'
    )


def _git_ignored(root: Path, rel: str) -> bool:
    import subprocess

    try:
        done = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "-q", "--no-index", rel],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True  # no git here: nothing would commit it
    return done.returncode != 1


def _record_path(root: Path, agent: str, scope: str) -> Path:
    """Where init keeps what it added (`Manifest`), in the state folder (ignored by git, see layout)."""
    from coordinator.disk.layout import state_dir_of

    name = f"{agent}-{scope}.json" if agent == "claude-code" else f"{agent}.json"
    return state_dir_of(str(root)) / "agents" / name


def _load_record(record: Path) -> Any:
    from coordinator.agents.settings import Manifest

    try:
        return Manifest.from_dict(json.loads(record.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return Manifest()


def _save_record(record: Path, manifest: Any) -> None:
    from coordinator.agents.settings import render, save
    from coordinator.disk.layout import ensure_state_dir

    ensure_state_dir(record.parent.parent)  # with its .gitignore: the record is this checkout's, not committed
    save(record, render(manifest.to_dict()))
