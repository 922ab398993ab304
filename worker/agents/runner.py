"""Run one real agent CLI, non-interactively and offline, in a scratch repository, against a scripted model.

A `Sandbox` is a scratch folder holding the repository (`repo/`: git, the files a test gives, the hooks
`edit-coordinator init <agent>` writes) and, per run, a home folder of its own (HOME, TMPDIR,
XDG_RUNTIME_DIR) with the agent's user settings: where its model is (the loopback server), that the folder
is trusted, and, for Codex, that each project hook is trusted (else Codex skips them without a word).

Hook payloads are captured by a second handler beside each of ours, in the same matcher group: it writes the
event it receives on stdin to a file of its own under `capture/` and answers nothing (exit 0), so the agent
behaves as with our hooks alone. `AgentRun.payloads` reads them back, oldest first.

How each agent is run (docs/agents/real-agents.md): Claude Code `-p` with stream-json output and
bypassPermissions (IS_SANDBOX=1 when root), ANTHROPIC_BASE_URL; Codex `exec -s workspace-write` with a model
provider whose `wire_api = "responses"` and the model gpt-5.5 (an unknown model gets no apply_patch tool);
Gemini CLI `-p` with `--approval-mode yolo`, GOOGLE_GEMINI_BASE_URL and `selectedType = "gemini-api-key"`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.agents.install import ensure
from worker.agents.modelserver import ModelServer, Policy

DEFAULT_TIMEOUT_S = 180.0
PROMPT = "Do the task the scripted model was given."


@dataclass
class AgentRun:
    """What one run of an agent did."""

    agent: str
    returncode: int | None  # None: killed at the timeout
    stdout: str = field(repr=False)
    stderr: str = field(repr=False)
    server: ModelServer = field(repr=False)
    payloads: list[dict[str, Any]] = field(repr=False)

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def main_requests(self) -> int:
        """The model requests of the session's conversation (side requests without tools not counted)."""
        return self.server.main_requests

    def events(self, name: str, tool: str | None = None) -> list[dict[str, Any]]:
        """The captured hook payloads of event `name` (of tool `tool` only, when given), in order."""
        return [
            p
            for p in self.payloads
            if p.get("hook_event_name") == name and (tool is None or p.get("tool_name") == tool)
        ]

    @property
    def sessions(self) -> set[str]:
        return {str(p["session_id"]) for p in self.payloads if "session_id" in p}


# -- the agents ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentKind:
    """What differs between agents: settings file, user settings, command line, environment."""

    name: str
    settings: str  # the hooks file `init` writes, relative to the repository
    argv: Callable[[Path, str], list[str]]
    env: Callable[[str], dict[str, str]]
    home: Callable[[Path, Path, str], None]  # (home, repo, model url): write the user settings
    timeout_unit: int = 1  # hooks' `timeout` is seconds (Gemini: milliseconds)


def _claude_argv(binary: Path, prompt: str) -> list[str]:
    return [str(binary), "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--permission-mode", "bypassPermissions"]  # fmt: skip


def _claude_env(url: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted",
        "IS_SANDBOX": "1",  # bypassPermissions as root
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def _claude_home(home: Path, repo: Path, url: str) -> None:
    pass


def _codex_argv(binary: Path, prompt: str) -> list[str]:
    return [str(binary), "exec", "-s", "workspace-write", "--skip-git-repo-check", prompt]


def _codex_env(url: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": "sk-scripted", "RUST_LOG": "warn"}  # CODEX_HOME: agent_env, from the home


def codex_config(repo: Path, url: str) -> str:
    return "\n".join([
        'model = "gpt-5.5"',
        'model_provider = "scripted"',
        "[model_providers.scripted]",
        'name = "scripted"',
        f"base_url = {json.dumps(url + '/v1')}",
        'wire_api = "responses"',
        'env_key = "OPENAI_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        f"[projects.{json.dumps(str(repo))}]",
        'trust_level = "trusted"',
        # Not /tmp as a writable root: Codex's sandbox makes .git, .codex and .agents folders in each writable
        # root, and an empty /tmp/.git makes every folder under /tmp look like part of one repository.
        "[sandbox_workspace_write]",
        "exclude_slash_tmp = true",
        "",
    ])  # fmt: skip


def _codex_home(home: Path, repo: Path, url: str) -> None:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(codex_config(repo, url))


def _gemini_argv(binary: Path, prompt: str) -> list[str]:
    return [str(binary), "-m", "gemini-2.5-pro", "--approval-mode", "yolo", "-p", prompt]


def _gemini_env(url: str) -> dict[str, str]:
    return {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "scripted", "GEMINI_CLI_NO_RELAUNCH": "true"}


def _gemini_home(home: Path, repo: Path, url: str) -> None:
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"disableAutoUpdate": True},
                "privacy": {"usageStatisticsEnabled": False}}  # fmt: skip
    (folder / "settings.json").write_text(json.dumps(settings))
    (folder / "trustedFolders.json").write_text(json.dumps({str(repo): "TRUST_FOLDER"}))


AGENTS: dict[str, AgentKind] = {
    "claude-code": AgentKind("claude-code", ".claude/settings.local.json", _claude_argv, _claude_env, _claude_home),
    "codex": AgentKind("codex", ".codex/hooks.json", _codex_argv, _codex_env, _codex_home),
    "gemini": AgentKind("gemini", ".gemini/settings.json", _gemini_argv, _gemini_env, _gemini_home, 1000),
}


# -- the sandbox ---------------------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=scripted", "-c", "user.email=scripted@example.invalid", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def coordinator_cli(
    *args: str, check: bool = True, env: dict[str, str] | None = None, python: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`edit-coordinator ARGS` of this installation (this interpreter, or the installation of `python`), output
    captured. -P: the working folder is not put on sys.path, so that another installation's interpreter runs its
    own package, not a checkout this is started from."""
    cmd = [python or sys.executable, "-P", "-m", "coordinator.cli", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"`edit-coordinator {' '.join(args)}` failed ({done.returncode}): {done.stderr or done.stdout}"
        )
    return done


@dataclass
class Sandbox:
    """A scratch folder: `repo/` (a git repository), `capture/` (hook payloads), `homes/` (one per run)."""

    agent: str
    base: Path
    hooked: bool = True
    _runs: Iterator[int] = field(default_factory=itertools.count)

    @property
    def kind(self) -> AgentKind:
        return AGENTS[self.agent]

    @property
    def repo(self) -> Path:
        return self.base / "repo"

    @property
    def capture(self) -> Path:
        return self.base / "capture"

    @classmethod
    def create(
        cls,
        agent: str,
        base: Path,
        files: dict[str, str],
        *,
        hooked: bool = True,
        capture: bool = True,
        python: str | None = None,
        init_args: tuple[str, ...] = (),
    ) -> Sandbox:
        """The repository with `files` committed, and the hooks of `agent` (with the capture handler beside each,
        unless `capture` is false) when `hooked`; `python` is the interpreter of the installation whose `init`
        writes them (default: this one), so that another checkout's hooks can be measured; `init_args`: more
        options of `init` (say `--hook-type command`)."""
        box = cls(agent, base, hooked)
        box.repo.mkdir(parents=True)
        box.capture.mkdir()
        git(box.repo, "init", "-q")
        for rel, text in files.items():
            (box.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (box.repo / rel).write_text(text)
        if files:
            git(box.repo, "add", "-A")
            git(box.repo, "commit", "-q", "-m", "start")
        if hooked:
            coordinator_cli("init", agent, "--root", str(box.repo), *init_args, python=python)
            if capture:
                add_handlers(box.repo / box.kind.settings, [capture_handler(box.capture, box.kind)])
            exclude = box.repo / ".git" / "info" / "exclude"  # the hooks' own files stay out of `git status`
            exclude.write_text(exclude.read_text() + f"/{box.kind.settings}\n/.edit-coordinator/\n")
        return box

    def home(self, url: str) -> Path:
        home = self.base / "homes" / str(next(self._runs))
        for sub in ("tmp", "run"):
            (home / sub).mkdir(parents=True)
        self.kind.home(home, self.repo, url)
        return home

    def payloads(self) -> list[dict[str, Any]]:
        """Every captured hook event so far, oldest first."""
        return read_captured(self.capture)

    def close(self) -> None:
        """Stop what the hooks started for the repository (the hook service, the embedded Redis)."""
        stop_services(self.repo)


def capture_handler(folder: Path, kind: AgentKind) -> dict[str, Any]:
    """A command hook that keeps the event it is given in a file of its own (named by the time, so they sort)
    and answers nothing."""
    command = f'cat > {shlex.quote(str(folder))}/"$(date +%s%N)-$$.json"'
    handler: dict[str, Any] = {"type": "command", "command": command, "timeout": 10 * kind.timeout_unit}
    if kind.name == "gemini":
        handler["name"] = "capture"
    return handler


def add_handlers(settings: Path, handlers: list[dict[str, Any]], events: set[str] | None = None) -> None:
    """Put `handlers` beside ours in every matcher group of the hooks file (of `events` only, when given)."""
    data = json.loads(settings.read_text())
    for event, groups in data.get("hooks", {}).items():
        if events is None or event in events:
            for group in groups:
                group["hooks"].extend(handlers)
    settings.write_text(json.dumps(data, indent=2) + "\n")


def read_captured(folder: Path, skip: set[str] | None = None) -> list[dict[str, Any]]:
    """The captured events in `folder` (but the files named in `skip`), oldest first."""
    files = [f for f in folder.glob("*.json") if f.name not in (skip or set())]
    out = []
    for f in sorted(files, key=lambda p: (int(p.name.split("-")[0]), p.name)):
        with contextlib.suppress(ValueError, OSError):
            out.append(json.loads(f.read_text()))
    return out


def stop_services(repo: Path) -> None:
    """Stop the repository's hook service and embedded Redis, if the hooks started them."""
    with contextlib.suppress(Exception):
        from coordinator.cli import hookservice

        hookservice.stop(str(repo))
    with contextlib.suppress(Exception):
        from coordinator.state.embedded import stop_embedded_redis

        stop_embedded_redis(repo / ".edit-coordinator")


# -- running -------------------------------------------------------------------------------------------------


def agent_env(kind: AgentKind, home: Path, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        **kind.env(url),
    }
    if kind.name == "codex":
        env["CODEX_HOME"] = str(home / ".codex")
    env.update(extra or {})
    return env


def run_agent(
    box: Sandbox,
    policy: Policy,
    *,
    prompt: str = PROMPT,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
    limit: int | None = None,
    args: tuple[str, ...] = (),
    cwd: Path | None = None,
    prepare: Callable[[Path, dict[str, str]], None] | None = None,
) -> AgentRun:
    """Run the agent once in the sandbox's repository, its model answering by `policy`; returns when the agent
    ends (or is killed at `timeout`, returncode None). `env` adds to (or overrides) the agent's environment;
    `limit` caps the model requests (the next is answered 400, which ends any of the three agents); `args`
    are added to the agent's command line (Claude Code's `--session-id ID`); `cwd`: the folder it starts in
    (default: the repository's top); `prepare(home, env)` runs after the run's home is made (its user
    settings written), before the agent starts."""
    binary = ensure(box.agent)
    seen_before = {p.name for p in box.capture.glob("*.json")}
    with ModelServer(policy, limit=limit) as server:
        home = box.home(server.url)
        full_env = agent_env(box.kind, home, server.url, env)
        if prepare is not None:
            prepare(home, full_env)
        if box.agent == "codex" and box.hooked:
            trust_codex_hooks(binary, box.repo, full_env)
        proc = subprocess.Popen(
            [*box.kind.argv(binary, prompt), *args],
            cwd=cwd or box.repo,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            code = None
    payloads = read_captured(box.capture, seen_before)
    return AgentRun(box.agent, code, out, err, server, payloads)


# -- Codex: trusting the project's hooks ---------------------------------------------------------------------


def codex_hooks(binary: Path, repo: Path, env: dict[str, str], timeout: float = 60.0) -> list[dict[str, Any]]:
    """The hooks Codex sees for `repo` (`codex app-server`, JSON-RPC `hooks/list`): each with `key`,
    `currentHash`, `trustStatus`, ..."""
    client = {"name": "edit-coordinator-tests", "version": "1"}
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": client}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(repo)]}},
    ]  # fmt: skip
    proc = subprocess.Popen([str(binary), "app-server"], cwd=repo, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(requests[0]) + "\n")
        proc.stdin.flush()
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                message = json.loads(line) if line.strip().startswith("{") else {}
                if message.get("id") == 1:
                    proc.stdin.write(json.dumps(requests[1]) + "\n" + json.dumps(requests[2]) + "\n")
                    proc.stdin.flush()
                elif message.get("id") == 2:
                    if "error" in message:
                        raise RuntimeError(f"codex app-server hooks/list: {message['error']}")
                    return [h for d in message["result"]["data"] for h in d.get("hooks", [])]
        finally:
            timer.cancel()
    finally:
        proc.kill()
        proc.wait()
    raise RuntimeError("codex app-server ended without answering hooks/list")


def trust_codex_hooks(binary: Path, repo: Path, env: dict[str, str]) -> int:
    """Trust every hook of the project in the user config (`[hooks.state."<key>"] trusted_hash`), as a person
    does in `/hooks`; returns how many. Codex runs no project hook without it."""
    hooks = codex_hooks(binary, repo, env)
    config = Path(env["CODEX_HOME"]) / "config.toml"
    lines = [config.read_text()]
    count = 0
    for hook in hooks:
        if hook.get("key") and hook.get("currentHash"):
            lines.append(f"[hooks.state.{json.dumps(hook['key'])}]\ntrusted_hash = {json.dumps(hook['currentHash'])}\n")
            count += 1
    config.write_text("\n".join(lines))
    return count
