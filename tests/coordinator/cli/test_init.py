"""`edit-coordinator init AGENT [--check|--remove]` through a real process, on a repository with settings."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXISTING = {
    "permissions": {"allow": ["Bash(make test)"]},
    "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}]},
    "statusLine": {"type": "command", "command": "echo hi"},
}


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "init", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".claude/settings.local.json\n")
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.local.json").write_text(json.dumps(EXISTING, indent=4))
    return tmp_path


def settings_of(repo: Path, rel: str = ".claude/settings.local.json") -> Any:
    return json.loads((repo / rel).read_text())


def test_init_check_remove_on_existing_claude_settings(repo: Path) -> None:
    done = run(repo, "claude-code")
    assert done.returncode == 0, done.stderr
    assert "added: PreToolUse hook" in done.stdout
    merged = settings_of(repo)
    assert merged["statusLine"] == EXISTING["statusLine"]
    assert merged["permissions"]["allow"] == ["Bash(make test)"]
    assert merged["permissions"]["deny"] == ["NotebookEdit"]
    assert merged["hooks"]["PreToolUse"][0] == EXISTING["hooks"]["PreToolUse"][0]
    from coordinator.agents.core import HOOK_KEY_HEADER
    from coordinator.cli.hookservice import http_endpoint

    ours = merged["hooks"]["PreToolUse"][1]["hooks"][0]  # Claude Code's http hook into the hook service
    endpoint = http_endpoint(repo.resolve())
    assert endpoint is not None and ours["url"] == f"http://127.0.0.1:{endpoint.port}/v1/hooks/claude-code"
    assert ours["type"] == "http" and ours["headers"][HOOK_KEY_HEADER] == endpoint.key and ours["onFailure"] == "block"
    assert (repo / ".edit-coordinator" / "hook-service" / "http.json").stat().st_mode & 0o777 == 0o600
    (starter,) = merged["hooks"]["SessionStart"][0]["hooks"]  # a command hook: it starts the service
    program, *words = shlex.split(starter["command"])  # the fast client, by absolute paths, on this root
    assert Path(program).is_absolute() and Path(program).exists()
    assert words[:2] == ["-I", "-S"] and Path(words[2]).name == "hookclient.py" and Path(words[2]).is_file()
    assert words[3:7] == ["claude-code", "--root", str(repo.resolve()), "--fail-open"] and words[-2:] == ["0;", "}"]
    (prompt,) = merged["hooks"]["UserPromptSubmit"][0]["hooks"]  # the same client; its own name in the log
    assert prompt["command"] == starter["command"].replace("SessionStart", "UserPromptSubmit") != starter["command"]

    again = run(repo, "claude-code")
    assert again.returncode == 0 and "nothing changed" in again.stdout
    assert settings_of(repo) == merged

    check = run(repo, "claude-code", "--check")
    assert check.returncode == 0, check.stdout
    assert "every hook is in place" in check.stdout

    del merged["hooks"]["PostToolUse"]
    (repo / ".claude" / "settings.local.json").write_text(json.dumps(merged, indent=4))
    check = run(repo, "claude-code", "--check")
    assert check.returncode == 1
    assert "missing: PostToolUse hook for ^(Read|Edit|MultiEdit|Write|Bash)$" in check.stdout

    # the record of what init added sits in the state folder, which git ignores
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert ".edit-coordinator" not in status.stdout

    removed = run(repo, "claude-code", "--remove")
    assert removed.returncode == 0, removed.stderr
    assert settings_of(repo) == EXISTING
    # the file was edited after init, so it is re-written: the 4-space indentation is kept, and a final newline
    assert (repo / ".claude" / "settings.local.json").read_text() == json.dumps(EXISTING, indent=4) + "\n"
    assert run(repo, "claude-code", "--check").returncode == 1


# The user's own formatting, which no re-serialisation reproduces: keys out of sorted order, unknown keys,
# short lists on one line, no space after a colon, blank lines, no newline at the end.
FOUR_SPACES = """{
    "statusLine": {"type": "command", "command": "echo hi"},
    "zeta": 1,

    "permissions": {
        "allow": ["Bash(make test)", "Read"],
        "deny": ["Bash(rm -rf /)"]
    },
    "alpha":[true, null]
}"""
TABS = '{\n\t"zz-unknown": {"b":2, "a":1},\n\t"hooks": {\n\t\t"BeforeTool": []\n\t},\n\t"mcpServers": {}\n}\n'


@pytest.mark.parametrize(
    ("agent", "rel", "text"),
    [("claude-code", ".claude/settings.local.json", FOUR_SPACES), ("gemini", ".gemini/settings.json", TABS)],
)
def test_remove_gives_back_the_users_own_text(tmp_path: Path, agent: str, rel: str, text: str) -> None:
    """init then init --remove leaves the file byte for byte as the user wrote it (at 0baa582 `remove`
    re-serialised it: one item a line, a space after each colon, a final newline). Once the user edits the
    file after init, the remembered text is not used (it would undo the edit): the parsed file is written."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    path = tmp_path / rel
    path.parent.mkdir()
    path.write_text(text)
    assert run(tmp_path, agent).returncode == 0
    assert path.read_text() != text
    assert run(tmp_path, agent).returncode == 0  # a second init, which changes nothing, keeps the record good
    removed = run(tmp_path, agent, "--remove")
    assert removed.returncode == 0, removed.stderr
    assert path.read_bytes() == text.encode()

    assert run(tmp_path, agent).returncode == 0
    edited = json.loads(path.read_text()) | {"added-later": True}
    path.write_text(json.dumps(edited, indent=4))
    assert run(tmp_path, agent, "--remove").returncode == 0
    assert json.loads(path.read_text()) == json.loads(text) | {"added-later": True}


def test_init_makes_the_file_and_remove_takes_it_away_again(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    done = run(tmp_path, "gemini", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["settings"] == ".gemini/settings.json"
    assert "BeforeTool hook for ^(write_file|replace|run_shell_command)$" in report["added"]
    assert settings_of(tmp_path, ".gemini/settings.json")["hooks"]["BeforeTool"][0]["hooks"][0]["name"] == (
        "edit-coordinator"
    )
    assert run(tmp_path, "gemini", "--remove").returncode == 0
    assert not (tmp_path / ".gemini" / "settings.json").exists()


def test_codex_over_http_and_a_broken_program_is_reported(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    done = run(tmp_path, "codex", "--http", "http://127.0.0.1:9/", "--token-env", "EC_ADMIN_TOKEN")
    assert done.returncode == 0, done.stderr
    hooks = settings_of(tmp_path, ".codex/hooks.json")["hooks"]
    command = hooks["PreToolUse"][0]["hooks"][0]["command"]
    assert command.startswith('EDIT_COORDINATOR_TOKEN="${EC_ADMIN_TOKEN}" ')
    assert "hook codex --server http://127.0.0.1:9 || { s=$?;" in command and command.endswith("exit 2; }")
    text = (tmp_path / ".codex" / "hooks.json").read_text()
    (tmp_path / ".codex" / "hooks.json").write_text(text.replace(command.split(" ")[1], "/nowhere/edit-coordinator"))
    check = run(tmp_path, "codex", "--check", "--http", "http://127.0.0.1:9", "--token-env", "EC_ADMIN_TOKEN")
    assert check.returncode == 1
    assert "/nowhere/edit-coordinator, which is not an executable here" in check.stdout
    assert "the service at http://127.0.0.1:9 is not answering its health check" in check.stdout


def test_malformed_settings_are_refused_and_left_untouched(repo: Path) -> None:
    path = repo / ".claude" / "settings.local.json"
    path.write_bytes(b'{"hooks": {"PreToolUse": [}\n')
    done = run(repo, "claude-code")
    assert done.returncode == 2
    assert "[invalid_argument]" in done.stderr and "Nothing was written" in done.stderr
    assert path.read_bytes() == b'{"hooks": {"PreToolUse": [}\n'
    assert run(repo, "claude-code", "--remove").returncode == 2
    assert path.read_bytes() == b'{"hooks": {"PreToolUse": [}\n'


def test_bad_options_are_refused(repo: Path) -> None:
    for args in (("--http", "http://x/$(rm -rf ~)"), ("--token-env", "A-B")):
        done = run(repo, "claude-code", *args)
        assert done.returncode == 2, args
        assert "[invalid_argument]" in done.stderr
    assert settings_of(repo) == EXISTING


def hook_command(repo: Path, rel: str, event: str) -> str:
    (group,) = [g for g in settings_of(repo, rel)["hooks"][event] if "coordinator" in json.dumps(g)]
    return str(group["hooks"][0]["command"])


def run_hook(command: str, event: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The command as the agent runs it: through a shell, the event on stdin, in the project folder."""
    return subprocess.run(
        ["/bin/sh", "-c", command], input=json.dumps(event), capture_output=True, text=True, timeout=120,
        cwd=event["cwd"], check=False,
    )  # fmt: skip


def test_the_commands_init_writes_run_and_fail_closed(tmp_path: Path) -> None:
    from coordinator.state.embedded import stop_embedded_redis

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "app.py").write_text("x = 1\n")
    try:
        from coordinator.cli import main

        for agent in ("claude-code", "codex", "gemini"):  # in this process: the hooks below are the real runs
            command = ["--hook-type", "command"] if agent == "claude-code" else []  # its default: http hooks
            assert main(["init", agent, "--root", str(repo), *command]) == 0
        claude = hook_command(repo, ".claude/settings.local.json", "PreToolUse")
        base = {"session_id": "s1", "cwd": str(repo), "tool_use_id": "t1"}
        edit = {
            **base,
            "hook_event_name": "PreToolUse",
            "tool_name": "Edit",
            "tool_input": {"file_path": str(repo / "app.py"), "old_string": "x = 1", "new_string": "x = 2"},
        }
        denied = run_hook(claude, edit)
        assert denied.returncode == 0, denied.stderr
        answer = json.loads(denied.stdout)["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny" and "Read it first" in answer["permissionDecisionReason"]
        read = {
            **base,
            "hook_event_name": "PostToolUse",
            "tool_name": "Read",
            "tool_use_id": "t0",
            "tool_input": {"file_path": str(repo / "app.py")},
            "tool_response": {
                "type": "text",
                "file": {
                    "filePath": str(repo / "app.py"),
                    "content": "x = 1\n",
                    "numLines": 1,
                    "startLine": 1,
                    "totalLines": 1,
                },
            },
        }
        assert run_hook(hook_command(repo, ".claude/settings.local.json", "PostToolUse"), read).returncode == 0
        allowed = run_hook(claude, edit)
        assert (allowed.returncode, allowed.stdout) == (0, "")

        codex = {
            **base,
            "session_id": "s2",
            "hook_event_name": "PreToolUse",
            "tool_name": "apply_patch",
            "tool_input": {"command": "*** Begin Patch\n*** Update File: app.py\n@@\n-x = 1\n+x = 3\n*** End Patch\n"},
        }
        refused = run_hook(hook_command(repo, ".codex/hooks.json", "PreToolUse"), codex)
        assert refused.returncode == 0 and "Read it first" in refused.stdout
        gemini = {
            **base,
            "session_id": "s3",
            "hook_event_name": "BeforeTool",
            "tool_name": "write_file",
            "tool_input": {"file_path": str(repo / "app.py"), "content": "x = 4\n"},
        }
        refused = run_hook(hook_command(repo, ".gemini/settings.json", "BeforeTool"), gemini)
        assert refused.returncode == 0 and json.loads(refused.stdout)["decision"] == "deny"

        # the program gone (a moved venv): the shell's 127 becomes the refusing exit status 2
        program = shlex.split(claude)[0]
        gone = run_hook(claude.replace(program, "/nowhere/python3", 1), edit)
        assert gone.returncode == 2
        assert (repo / "app.py").read_text() == "x = 1\n"
        from coordinator.cli import hookservice

        assert hookservice.stop(repo)  # the hooks above started the repository's hook service; it stops
        assert hookservice.find_running(str(repo)) is None or not hookservice.stop(repo)
    finally:
        from coordinator.cli import hookservice

        hookservice.stop(repo)  # the first hook without a server started the repository's hook service
        stop_embedded_redis(repo / ".edit-coordinator")


def test_with_the_interpreter_gone_only_the_guarding_hooks_refuse(tmp_path: Path) -> None:
    """A moved venv: the commands init writes run a program that is not there (127). The hooks that guard a
    write refuse (exit 2); every other event goes on (exit 0; Gemini CLI's `{}`) instead of keeping the
    agent going at the end of its turn, and each failure is logged where `status` and `init --check` show it."""
    from coordinator.agents import failures

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".edit-coordinator").mkdir()
    files = {
        "claude-code": ".claude/settings.local.json",
        "codex": ".codex/hooks.json",
        "gemini": ".gemini/settings.json",
    }
    answers = {}
    for agent, rel in files.items():
        assert run(repo, agent, *(("--hook-type", "command") if agent == "claude-code" else ())).returncode == 0
        _rewrite_commands(repo / rel, lambda c: c.replace(shlex.split(c)[0], "/nowhere/python3", 1))
        for event, groups in settings_of(repo, rel)["hooks"].items():
            (handler,) = [h for g in groups for h in g["hooks"] if "hookclient.py" in h.get("command", "")]
            done = run_hook(handler["command"], {"hook_event_name": event, "session_id": "s", "cwd": str(repo)})
            answers[agent, event] = (done.returncode, done.stdout.strip(), "exited 127" in done.stderr)
    guards = {("claude-code", "PreToolUse"), ("codex", "PreToolUse"), ("gemini", "BeforeTool")}
    for (agent, event), answer in answers.items():
        if (agent, event) in guards:
            assert answer == (2, "", True), (agent, event)
        else:
            assert answer == (0, "{}" if agent == "gemini" else "", False), (agent, event)
    count, logged = failures.recent(repo, 100)
    assert count == len(answers) and {(f.agent, f.event) for f in logged} == set(answers)
    assert all("exited 127" in f.what for f in logged)
    check = run(repo, "codex", "--check")
    codex_failures = sum(1 for agent, _ in answers if agent == "codex")  # one per event init hooks
    assert codex_failures == 5 and f"{codex_failures} hook failure(s) logged" in check.stdout
    assert "codex Stop: the hook command exited 127" in check.stdout


def _rewrite_commands(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    for groups in data["hooks"].values():
        for group in groups:
            for handler in group["hooks"]:
                if "hookclient.py" in handler.get("command", ""):
                    handler["command"] = change(handler["command"])
    path.write_text(json.dumps(data, indent=4))


def test_check_reports_the_old_command_and_a_client_that_is_gone(repo: Path) -> None:
    assert run(repo, "claude-code").returncode == 0
    assert run(repo, "claude-code", "--check").returncode == 0
    path = repo / ".claude" / "settings.local.json"
    fast = settings_of(repo)
    _rewrite_commands(path, lambda _: f"{shlex.quote(sys.executable)} -m coordinator.cli hook claude-code || exit 2")
    old = run(repo, "claude-code", "--check")
    assert old.returncode == 1
    assert "run `edit-coordinator hook claude-code`, the command an earlier version wrote" in old.stdout
    assert run(repo, "claude-code").returncode == 0 and settings_of(repo) == fast  # init puts the fast one back
    client = "/coordinator/cli/hookclient.py"
    _rewrite_commands(path, lambda c: c.replace(client, "/gone" + client))
    gone = run(repo, "claude-code", "--check")
    assert gone.returncode == 1 and "/gone/coordinator/cli/hookclient.py, which is not here" in gone.stdout


def test_init_writes_mcp_tool_hooks_into_the_mcp_server(repo: Path) -> None:
    done = run(repo, "claude-code", "--hook-type", "mcp_tool")
    assert done.returncode == 0, done.stderr
    assert "mcp --root" in done.stdout and "--hook-tool" in done.stdout  # how to register the server
    (pre,) = [g for g in settings_of(repo)["hooks"]["PreToolUse"] if g.get("matcher") != "Bash"]
    handler = pre["hooks"][0]
    assert (handler["type"], handler["server"], handler["tool"], handler["onFailure"]) == (
        "mcp_tool",
        "edit-coordinator",
        "hook",
        "block",
    )
    assert handler["input"]["file_path"] == "${tool_input.file_path}"
    assert handler["input"]["content"] == "${tool_response.file.content}"
    assert run(repo, "claude-code", "--hook-type", "mcp_tool", "--check").returncode == 0
    assert run(repo, "claude-code", "--check").returncode == 1  # the command form is not what is there
    assert run(repo, "claude-code", "--remove").returncode == 0
    assert settings_of(repo) == EXISTING
    for args in (
        ("codex", "--hook-type", "mcp_tool"),
        ("claude-code", "--hook-type", "mcp_tool", "--http", "http://h"),
    ):
        refused = run(repo, *args)
        assert refused.returncode == 2 and "[invalid_argument]" in refused.stderr, args


@pytest.mark.slow  # about 9 s: .ci/run's step 1b runs it (the default run stays under 10 minutes)
def test_remove_stops_what_the_hooks_started_and_leaves_no_empty_folder(tmp_path: Path) -> None:
    """init --remove takes out the hooks and stops the hook service and the embedded Redis (at 0effb2a both
    outlived it: the service 30 min, Redis for good); a .claude/ that init made is not left empty. `redis
    stop` takes the hook service with it (left running it would refuse every guarded edit), and `stop` stops
    everything the repository started."""
    from coordinator.cli import hookservice
    from coordinator.state.embedded import embedded_status, stop_embedded_redis

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    state = repo / ".edit-coordinator"
    try:
        for agent in ("codex", "gemini"):  # settings that are usually committed: the same note as Claude Code's
            done = run(repo, agent)
            assert "names this machine's interpreter" in done.stdout, done.stdout
        assert run(repo, "claude-code").returncode == 0
        hookservice.start(str(repo))
        assert hookservice.find_running(str(repo)) is not None and embedded_status(state) is not None
        removed = run(repo, "claude-code", "--remove")
        assert removed.returncode == 0 and "stopped hook service and embedded Redis" in removed.stdout, removed.stdout
        assert not (repo / ".claude").exists()
        assert not hookservice.stop(repo) and embedded_status(state) is None

        hookservice.start(str(repo))
        cli = [sys.executable, "-m", "coordinator.cli"]
        subprocess.run([*cli, "redis", "stop", "--root", str(repo)], check=True, capture_output=True, timeout=60)
        assert not hookservice.stop(repo) and embedded_status(state) is None
        hookservice.start(str(repo))
        done = subprocess.run([*cli, "stop", "--root", str(repo)], capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == "stopped: hook service, embedded Redis", done.stdout + done.stderr
        assert not hookservice.stop(repo) and embedded_status(state) is None
    finally:
        hookservice.stop(repo)
        stop_embedded_redis(state)


def test_gemini_folder_trust_is_reported(tmp_path: Path) -> None:
    """Gemini CLI loads no project settings (no hooks) in a folder it does not trust, and says nothing:
    init gemini reports it, and that it must be started at the repository's top."""
    from coordinator.cli.agents_init import gemini_trust

    home, repo = tmp_path / "home", tmp_path / "work" / "repo"
    (home / ".gemini").mkdir(parents=True)
    repo.mkdir(parents=True)
    trusted = home / ".gemini" / "trustedFolders.json"
    assert "does not name it" in str(gemini_trust(repo, home))
    trusted.write_text(json.dumps({str(repo): "TRUST_FOLDER"}))
    assert gemini_trust(repo, home) is None
    trusted.write_text(json.dumps({str(repo / "x"): "TRUST_PARENT"}))
    assert gemini_trust(repo, home) is None
    trusted.write_text(json.dumps({str(tmp_path): "TRUST_FOLDER", str(repo): "DO_NOT_TRUST"}))
    assert "DO_NOT_TRUST" in str(gemini_trust(repo, home))
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"folderTrust": {"enabled": False}}}))
    assert gemini_trust(repo, home) is None
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "init", "gemini", "--root", str(repo)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path / "empty-home")},
    )  # fmt: skip
    assert "Gemini CLI does not trust" in done.stdout and "from a subfolder" in done.stdout, done.stdout
