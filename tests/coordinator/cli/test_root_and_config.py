"""Where the repository is (found upwards, never / or the home folder unless asked) and the project config
(defaults below the flags and variables), for a new user in a subfolder, in /, and in the home folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli import build_parser, main
from coordinator.cli.config import engine_options, find_root, project_config, settle
from coordinator.errors import CoordinatorError, ErrorCode


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository's top with a subfolder, under a fake home folder that is not the repository."""
    home = tmp_path / "home"
    top = home / "project"
    (top / "src" / "deep").mkdir(parents=True)
    (top / ".git").mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("EDIT_COORDINATOR_ROOT", "EDIT_COORDINATOR_POLICY", "EDIT_COORDINATOR_MATCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("EDIT_COORDINATOR_REDIS_URL", raising=False)
    return top


def test_root_is_found_upwards_from_a_subfolder(repo: Path) -> None:
    assert find_root(repo / "src" / "deep") == str(repo)
    assert find_root(repo) == str(repo)


def test_a_folder_holding_the_state_folder_is_a_root(repo: Path) -> None:
    (repo / "src" / ".edit-coordinator").mkdir()
    assert find_root(repo / "src" / "deep") == str(repo / "src")


def test_slash_is_refused_unless_asked(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CoordinatorError) as info:
        find_root("/")
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    assert "--root" in info.value.message
    args = build_parser().parse_args(["status", "--root", "/"])
    settle(args)
    assert args.root == "/"


def test_home_folder_is_refused_and_never_found_from_below(repo: Path) -> None:
    home = repo.parent
    with pytest.raises(CoordinatorError) as info:
        find_root(home)
    assert "home folder" in info.value.message
    # A state folder left in the home folder is not the root of a folder below it outside any repository.
    (home / ".edit-coordinator").mkdir()
    (home / "notes").mkdir()
    assert find_root(home / "notes") == str(home / "notes")
    assert find_root(repo / "src") == str(repo)


def _cli(cwd: Path | str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command as a new user runs it: no EDIT_COORDINATOR_* variable, HOME the fixture's fake one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_new_user_in_a_subfolder_shares_the_coordinator_of_the_top(repo: Path) -> None:
    sub = repo / "src"
    (sub / "a.txt").write_text("one\n")
    try:
        read = _cli(sub, "read", "a.txt", "--session", "s1")  # relative to the current folder
        assert read.returncode == 0, read.stderr
        # The same session edits from the top, by the path relative to the top: the read is known there.
        edit = _cli(repo, "edit", "src/a.txt", "--session", "s1", "--old", "one", "--new", "two")
        assert edit.returncode == 0, edit.stderr
        # An absolute path from a deeper subfolder works too, still as the same coordinator.
        again = _cli(sub / "deep", "edit", str(sub / "a.txt"), "--session", "s1", "--old", "two", "--new", "3")
        assert again.returncode == 0, again.stderr
        assert (sub / "a.txt").read_text() == "3\n"
        assert (repo / ".edit-coordinator").is_dir()
        assert not (sub / ".edit-coordinator").exists()
        assert not (sub / "deep" / ".edit-coordinator").exists()
    finally:
        _cli(repo, "redis", "stop")


def test_new_user_in_the_home_folder_is_told_what_to_do(repo: Path) -> None:
    home = repo.parent
    done = _cli(home, "status")
    assert done.returncode == 2
    assert "[invalid_argument]" in done.stderr and "--root" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (home / ".edit-coordinator").exists()


def test_new_user_in_slash_is_told_what_to_do(repo: Path) -> None:
    done = _cli("/", "leases", "list")
    assert done.returncode == 2, done.stderr
    assert "The current folder is /" in done.stderr


def test_project_config_sets_defaults_below_variables_and_flags(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.edit-coordinator]\npolicy = "rebase"\nmatch = "flexible"\n'
        'durability = "none"\nredis-url = "redis://127.0.0.1:7001/0"\n'
    )
    monkeypatch.chdir(repo / "src")
    args = build_parser().parse_args(["edit", "f", "--old", "a", "--new", "b"])
    settle(args)
    assert (args.root, args.policy, args.match, args.durability) == (str(repo), "rebase", "flexible", "none")
    assert args.redis_url == "redis://127.0.0.1:7001/0"
    monkeypatch.setenv("EDIT_COORDINATOR_POLICY", "strict")
    monkeypatch.setenv("EDIT_COORDINATOR_REDIS_URL", "redis://127.0.0.1:7002/0")
    args = build_parser().parse_args(["mcp", "--match", "exact", "--durability", "fsync"])
    settle(args)
    assert (args.policy, args.match, args.durability) == ("strict", "exact", "fsync")
    assert args.redis_url == "redis://127.0.0.1:7002/0"


def test_engine_options_without_a_command_line_follow_the_same_order(repo: Path) -> None:
    """A coordinator made with no command line (a hook deciding in its own process) takes its options as a
    settled command line would: the variable, else the project config, else the built-in default."""
    assert engine_options(str(repo), {}) == {"durability": "fsync"}
    (repo / ".edit-coordinator.toml").write_text(
        'policy = "rebase"\ndurability = "none"\nredis-url = "redis://h:1/0"\n'
    )
    config = engine_options(str(repo), {})
    assert config == {"policy": "rebase", "durability": "none", "redis_url": "redis://h:1/0"}
    env = {"EDIT_COORDINATOR_POLICY": "strict", "EDIT_COORDINATOR_MATCH": "flexible", "EDIT_COORDINATOR_REDIS_URL": ""}
    assert engine_options(str(repo), env) == config | {"policy": "strict", "match": "flexible"}


def test_own_config_file_wins_and_bad_settings_are_refused(repo: Path) -> None:
    (repo / "pyproject.toml").write_text('[tool.edit-coordinator]\npolicy = "rebase"\n')
    (repo / ".edit-coordinator.toml").write_text('match = "flexible"\nserver = "https://h:1"\n')
    assert project_config(repo) == {"match": "flexible", "server": "https://h:1"}
    (repo / ".edit-coordinator.toml").write_text('polcy = "rebase"\n')
    with pytest.raises(CoordinatorError, match="unknown key 'polcy'"):
        project_config(repo)
    (repo / ".edit-coordinator.toml").write_text('policy = "lenient"\n')
    with pytest.raises(CoordinatorError, match="strict, rebase"):
        project_config(repo)
    (repo / ".edit-coordinator.toml").write_text("policy = \n")
    with pytest.raises(CoordinatorError, match="not valid TOML"):
        project_config(repo)


def test_a_bad_project_config_is_one_error_line(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / ".edit-coordinator.toml").write_text('durability = "sometimes"\n')
    monkeypatch.chdir(repo)
    assert main(["mcp", "--print-tools"]) == 2
    assert "edit-coordinator: [invalid_argument] The project config" in capsys.readouterr().err


def _documented_configs() -> list[tuple[str, str, str]]:
    """(document, file name, text) of every config example the documents give: ```toml blocks, and the
    `key = value` spans of a paragraph that names `.edit-coordinator.toml` or `[tool.edit-coordinator]`."""
    import re
    import tomllib

    from tests import REPO_ROOT

    found = []
    for doc in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        name = str(doc.relative_to(REPO_ROOT))
        for block in re.findall(r"```toml\n(.*?)```", text, re.DOTALL):
            data = tomllib.loads(block)
            if "tool" in data and "edit-coordinator" in data["tool"]:
                found.append((name, "pyproject.toml", block))
            elif not {"project", "tool", "build-system"} & set(data):
                found.append((name, ".edit-coordinator.toml", block))
        for paragraph in text.split("\n\n"):
            if ".edit-coordinator.toml" in paragraph or "[tool.edit-coordinator]" in paragraph:
                for span in re.findall(r"`([a-z][a-z0-9_-]* = [^`\n]+)`", paragraph):
                    found.append((name, ".edit-coordinator.toml", span + "\n"))
    return found


def test_every_documented_config_example_is_accepted(tmp_path: Path) -> None:
    """docs/git.md documented `auto-commit = true`, which the loader refused as an unknown key: the hook
    service never started and every hooked Edit was refused after a 60 s wait."""
    examples = _documented_configs()
    assert any("auto-commit = true" in text for _, _, text in examples)
    for doc, file_name, text in examples:
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / file_name).write_text(text)
        assert project_config(folder), (doc, text)


def test_auto_commit_is_a_boolean(repo: Path) -> None:
    (repo / ".edit-coordinator.toml").write_text("auto-commit = true\n")
    assert project_config(repo) == {"auto_commit": True}
    (repo / ".edit-coordinator.toml").write_text('auto-commit = "yes"\n')
    with pytest.raises(CoordinatorError, match="true or false"):
        project_config(repo)
