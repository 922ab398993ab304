"""The settings merge behind `edit-coordinator init`: nothing of the user's lost, idempotent, --check, --remove
back to the original, malformed files refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.agents import settings as st
from coordinator.errors import CoordinatorError, ErrorCode

PROGRAM = ("/opt/ec/bin/edit-coordinator",)

USER_CLAUDE: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"], "deny": ["Read(./.env)"], "defaultMode": "acceptEdits"},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/.claude/guard.sh"}]},
            {"matcher": "Write", "hooks": [{"type": "command", "command": "lint-staged"}]},
        ],
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write"}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
    },
    "env": {"FOO": "1"},
    "someFutureKey": {"nested": [1, 2, {"x": None}]},
}

USER_GEMINI: dict[str, Any] = {
    "theme": "Dracula",
    "tools": {"sandbox": False},
    "hooks": {
        "disabled": ["auto-test"],
        "BeforeTool": [
            {
                "matcher": "run_shell_command",
                "hooks": [{"name": "secret-scanner", "type": "command", "command": "scan"}],
            }
        ],
    },
}


def claude_plan(**kw: Any) -> st.Plan:
    return st.plan("claude-code", st.Target(program=PROGRAM, **kw))


def user_parts_of(settings: dict[str, Any], agent: str) -> dict[str, Any]:
    """`settings` with every handler of ours taken out (groups they leave empty dropped), for comparison."""
    out = copy.deepcopy(settings)
    for groups in out.get("hooks", {}).values():
        if isinstance(groups, list):
            for g in groups:
                if isinstance(g, dict):
                    g["hooks"] = [h for h in g["hooks"] if not st.is_ours(h, agent)]
    for event, groups in list(out.get("hooks", {}).items()):
        if isinstance(groups, list):
            out["hooks"][event] = [g for g in groups if not isinstance(g, dict) or g["hooks"]]
    return out


def test_merge_into_existing_claude_settings_keeps_every_user_part() -> None:
    before = copy.deepcopy(USER_CLAUDE)
    merged, changes, manifest = st.merge(USER_CLAUDE, claude_plan())
    assert before == USER_CLAUDE  # the input is not changed in place
    assert st.missing(merged, claude_plan()) == []
    # everything of the user's is still there, in its order
    cleaned = user_parts_of(merged, "claude-code")
    cleaned["permissions"]["deny"].remove("NotebookEdit")
    for event in ("PostToolUseFailure", "Stop", "SubagentStop", "SessionEnd"):
        assert cleaned["hooks"].pop(event) == []
    assert cleaned == USER_CLAUDE
    assert list(merged) == list(USER_CLAUDE)
    assert merged["hooks"]["PreToolUse"][:2] == USER_CLAUDE["hooks"]["PreToolUse"]
    assert manifest.deny_added == ["NotebookEdit"]
    assert "deny rule NotebookEdit" in changes.added
    assert len([c for c in changes.added if "hook" in c]) == 6


def test_handlers_are_what_the_agent_needs() -> None:
    merged, _, _ = st.merge({}, claude_plan())
    pre = merged["hooks"]["PreToolUse"][0]
    assert pre["matcher"] == "^(Edit|MultiEdit|Write|Bash)$"
    handler = pre["hooks"][0]
    assert handler["command"].startswith("/opt/ec/bin/edit-coordinator hook claude-code || { s=$?;")
    assert handler["command"].endswith("exit 2; }")
    for event in ("PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "SessionEnd"):
        command = merged["hooks"][event][0]["hooks"][0]["command"]
        assert command.startswith("/opt/ec/bin/edit-coordinator hook claude-code --fail-open || { s=$?;")
        assert command.endswith("exit 0; }") and "exit 2" not in command, event
    assert handler["onFailure"] == "block"
    assert handler["timeout"] >= 10
    assert merged["hooks"]["PostToolUse"][0]["matcher"] == "^(Read|Edit|MultiEdit|Write|Bash)$"
    assert "onFailure" not in merged["hooks"]["PostToolUse"][0]["hooks"][0]
    assert set(merged["hooks"]) == {
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    }
    assert merged["permissions"] == {"deny": ["NotebookEdit"]}


def test_http_target_names_the_token_variable_never_a_token() -> None:
    merged, _, _ = st.merge({}, claude_plan(server="http://127.0.0.1:8765", token_env="EC_TOKEN"))
    handler = merged["hooks"]["PreToolUse"][0]["hooks"][0]
    assert handler == {
        "type": "http",
        "url": "http://127.0.0.1:8765/v1/hooks/claude-code",
        "headers": {
            "Authorization": "Bearer $EC_TOKEN",
            "x-edit-coordinator-auto-commit": "$EDIT_COORDINATOR_AUTO_COMMIT",  # the session's own setting
        },
        "allowedEnvVars": ["EC_TOKEN", "EDIT_COORDINATOR_AUTO_COMMIT"],
        "timeout": st.PRE_TIMEOUT_S,
        "onFailure": "block",
    }
    assert st.is_ours(handler, "claude-code") and not st.is_ours(handler, "gemini")


def test_command_with_a_server_passes_the_token_through_the_environment() -> None:
    command = st.hook_command(
        "codex", st.Target(program=("/p q/python", "-m", "coordinator.cli"), server="https://h:1")
    )
    expected = "EDIT_COORDINATOR_TOKEN=\"${EDIT_COORDINATOR_TOKEN}\" '/p q/python' -m coordinator.cli hook codex"
    assert command.startswith(expected + " --server https://h:1 || { s=$?;") and command.endswith("exit 2; }")
    assert st.is_ours({"command": command}, "codex")
    assert st.program_of({"command": command}) == "/p q/python"


def test_merging_twice_adds_nothing() -> None:
    once, _, _ = st.merge(USER_CLAUDE, claude_plan())
    twice, changes, manifest = st.merge(once, claude_plan())
    assert twice == once
    assert not changes.any
    assert manifest.deny_added == [] and manifest.created == []


def test_an_older_handler_of_ours_is_replaced_in_place_of_being_duplicated() -> None:
    old = st.merge(USER_CLAUDE, st.plan("claude-code", st.Target(program=("/old/bin/edit-coordinator",))))[0]
    new, changes, _ = st.merge(old, claude_plan())
    assert st.missing(new, claude_plan()) == []
    assert "/old/bin" not in json.dumps(new)
    assert len(st.ours(new, "claude-code")) == 6
    assert len(changes.updated) == 6 and not changes.added and not changes.removed
    assert user_parts_of(new, "claude-code") == user_parts_of(old, "claude-code")


def test_a_user_handler_beside_ours_in_one_group_stays() -> None:
    merged = st.merge({}, claude_plan())[0]
    merged["hooks"]["PreToolUse"][0]["hooks"].append({"type": "command", "command": "audit-log"})
    again, changes, _ = st.merge(merged, claude_plan())
    assert not changes.any
    cleaned, _ = st.remove(again, "claude-code", None)
    assert cleaned["hooks"]["PreToolUse"] == [
        {"matcher": "^(Edit|MultiEdit|Write|Bash)$", "hooks": [{"type": "command", "command": "audit-log"}]}
    ]


def test_check_reports_each_missing_part() -> None:
    p = claude_plan()
    assert st.missing({}, p) == [st.describe(w) for w in p.hooks] + ["deny rule NotebookEdit"]
    merged = st.merge(USER_CLAUDE, p)[0]
    del merged["hooks"]["Stop"]
    merged["permissions"]["deny"].remove("NotebookEdit")
    merged["hooks"]["PreToolUse"][2]["hooks"][0]["command"] = "/elsewhere/edit-coordinator hook claude-code"
    assert st.missing(merged, p) == [
        "PreToolUse hook for ^(Edit|MultiEdit|Write|Bash)$",
        "Stop hook",
        "deny rule NotebookEdit",
    ]
    assert st.unwanted(merged, p) == ["PreToolUse hook for ^(Edit|MultiEdit|Write|Bash)$"]


@pytest.mark.parametrize("agent", st.AGENTS)
@pytest.mark.parametrize("original", [{}, USER_CLAUDE, USER_GEMINI], ids=["empty", "claude-like", "gemini-like"])
def test_remove_restores_the_original(agent: str, original: dict[str, Any]) -> None:
    p = st.plan(agent, st.Target(program=PROGRAM))
    merged, _, manifest = st.merge(original, p)
    assert st.ours(merged, agent)
    cleaned, changes = st.remove(merged, agent, manifest)
    assert cleaned == original
    assert changes.any


def test_remove_without_a_record_keeps_deny_rules_that_may_be_the_users() -> None:
    merged, _, _ = st.merge(USER_CLAUDE, claude_plan())
    cleaned, _ = st.remove(merged, "claude-code", None)
    assert cleaned["permissions"]["deny"] == ["Read(./.env)", "NotebookEdit"]
    assert user_parts_of(cleaned, "claude-code")["hooks"] == USER_CLAUDE["hooks"]


def test_a_deny_rule_the_user_had_stays_after_remove() -> None:
    original = {"permissions": {"deny": ["NotebookEdit"]}}
    merged, _, manifest = st.merge(original, claude_plan())
    assert manifest.deny_added == []
    assert st.remove(merged, "claude-code", manifest)[0] == original


def test_remove_only_takes_the_named_agents_handlers() -> None:
    both = st.merge(st.merge({}, claude_plan())[0], st.plan("gemini", st.Target(program=PROGRAM)))[0]
    left, _ = st.remove(both, "gemini", None)
    assert st.missing(left, claude_plan()) == []
    assert st.ours(left, "gemini") == []


def test_handlers_of_others_are_not_mistaken_for_ours() -> None:
    for handler in (
        {"type": "command", "command": "echo edit-coordinator"},
        {"type": "command", "command": "my-tool hook claude-code"},
        {"type": "http", "url": "http://x/v1/hooks/claude-code/extra"},
        {"type": "command", "command": ["not", "a", "string"]},
        "a string",
    ):
        assert not st.is_ours(handler, "claude-code"), handler
    assert st.is_ours({"command": "'/a b/edit-coordinator' hook claude-code || exit 2"}, "claude-code")
    assert st.is_ours({"command": "/usr/bin/python3 -m coordinator.cli hook gemini"}, "gemini")


def test_gemini_plan_uses_its_tool_names_and_milliseconds() -> None:
    merged, _, _ = st.merge(USER_GEMINI, st.plan("gemini", st.Target(program=PROGRAM)))
    before = merged["hooks"]["BeforeTool"]
    assert before[0] == USER_GEMINI["hooks"]["BeforeTool"][0]
    assert before[1]["matcher"] == "^(write_file|replace|run_shell_command)$"
    assert before[1]["hooks"][0]["timeout"] == st.PRE_TIMEOUT_S * 1000
    assert before[1]["hooks"][0]["name"] == "edit-coordinator"
    assert merged["hooks"]["AfterTool"][0]["matcher"] == "^(read_file|write_file|replace)$"
    assert merged["hooks"]["disabled"] == ["auto-test"]
    assert "permissions" not in merged


def test_codex_plan_matches_apply_patch_and_bash() -> None:
    merged, _, _ = st.merge({}, st.plan("codex", st.Target(program=PROGRAM)))
    assert merged["hooks"]["PreToolUse"][0]["matcher"] == "^(apply_patch|Bash)$"
    assert merged["hooks"]["PostToolUse"][0]["matcher"] == "^(apply_patch|Bash)$"  # shell reads are reads
    assert merged["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"] <= 3  # Codex's cap for SessionEnd
    assert st.settings_path("codex") == ".codex/hooks.json"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("{", "not JSON"),
        ('{"a": 1,}', "not JSON"),
        ('// a comment\n{"a": 1}', "not JSON"),
        ("[1, 2]", "top level is a list"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"hooks": []}', '"hooks" is not an object'),
        ('{"hooks": {"PreToolUse": {"matcher": "x"}}}', '"hooks.PreToolUse" is not a list'),
        ('{"hooks": {"PreToolUse": ["x"]}}', "is not a matcher group"),
        ('{"hooks": {"PreToolUse": [{"hooks": "x"}]}}', "is not a matcher group"),
        ('{"permissions": []}', '"permissions" is not an object'),
        ('{"permissions": {"deny": "NotebookEdit"}}', '"permissions.deny" is not a list'),
    ],
)
def test_malformed_settings_are_refused(text: str, what: str) -> None:
    with pytest.raises(CoordinatorError) as info:
        st.parse(text, ".claude/settings.json", claude_plan().events)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert what in info.value.message
    assert "Nothing was written" in info.value.message
    assert info.value.details["reason"] == "settings_malformed"


def test_keys_beside_the_events_we_write_are_not_judged() -> None:
    settings = st.parse(
        '{"hooks": {"enabled": true, "disabled": ["x"], "Custom": "y"}}', "s", frozenset({"BeforeTool"})
    )
    merged, _, manifest = st.merge(settings, st.plan("gemini", st.Target(program=PROGRAM)))
    assert st.remove(merged, "gemini", manifest)[0] == settings


def test_empty_file_is_no_settings_yet() -> None:
    assert st.parse(" \n", "s") == {}


def test_save_replaces_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "settings.json"
    st.save(path, '{"a": 1}\n')
    assert path.read_text() == '{"a": 1}\n'
    path.chmod(0o600)
    st.save(path, '{"a": 2}\n')
    assert path.read_text() == '{"a": 2}\n'
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]  # no temporary left


def test_save_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    st.save(link, '{"b": 1}\n')
    assert link.is_symlink()
    assert real.read_text() == '{"b": 1}\n'


def test_load_refuses_a_folder_and_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(CoordinatorError):
        st.load(tmp_path / "dir.json", "dir.json")
    (tmp_path / "bin.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(CoordinatorError) as info:
        st.load(tmp_path / "bin.json", "bin.json")
    assert "UTF-8" in info.value.message
    assert st.load(tmp_path / "absent.json", "absent.json") == ({}, False)


def test_the_files_indentation_is_kept() -> None:
    assert st.indent_of('{\n    "a": 1\n}') == 4
    assert st.indent_of('{\n\t"a": 1\n}') == "\t"
    assert st.indent_of('{"a": 1}') == 2
    text = st.render({"a": {"b": 1}}, st.indent_of('{\n    "x": 0\n}'))
    assert text == '{\n    "a": {\n        "b": 1\n    }\n}\n'


def test_the_bash_first_opt_out_is_written_when_the_release_reads_it_and_removed_with_the_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`init claude-code` puts CLAUDE_CODE_THRIFTY_SONIC=0 in the settings' env only when the `claude` on PATH
    names that variable in its code; the user's own value stays; `--check` reports it missing; `remove`
    takes out only what init added."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_bytes(b"#!/bin/sh\n" + b"x" * 100 + b"if(s.CLAUDE_CODE_THRIFTY_SONIC!==void 0)\n")
    claude.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    p = st.plan("claude-code", st.Target(program=PROGRAM))
    assert p.env == ((st.BASH_FIRST_ENV, "0"),)
    assert "env CLAUDE_CODE_THRIFTY_SONIC=0" in st.missing({}, p)
    merged, changes, manifest = st.merge({"env": {"OTHER": "1"}}, p)
    assert merged["env"] == {"OTHER": "1", "CLAUDE_CODE_THRIFTY_SONIC": "0"}
    assert "env CLAUDE_CODE_THRIFTY_SONIC=0" in changes.added and st.missing(merged, p) == []
    assert st.remove(merged, "claude-code", manifest)[0] == {"env": {"OTHER": "1"}}
    users = st.merge({"env": {"CLAUDE_CODE_THRIFTY_SONIC": "1"}}, p)[0]
    assert users["env"] == {"CLAUDE_CODE_THRIFTY_SONIC": "1"}  # the user's choice is kept
    claude.write_bytes(b"#!/bin/sh\nnothing of it here\n")
    assert st.plan("claude-code", st.Target(program=PROGRAM)).env == ()  # not confirmed: not written
