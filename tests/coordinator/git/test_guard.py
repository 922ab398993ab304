"""The git guard in a shared tree where another session has uncommitted work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.git.guard import check_shell_command, git_invocations, judge_shell_command
from tests.coordinator.git.conftest import edit, git

DESTRUCTIVE = [
    "git stash",
    "git stash push -m x",
    "git checkout -- a.py",
    "git checkout a.py",
    "git checkout .",
    "git checkout other-branch",
    "git switch other-branch",
    "git restore a.py",
    "git restore .",
    "git reset --hard",
    "git reset --hard HEAD~1",
    "git clean -fd",
    "git add -A",
    "git add .",
    "git add a.py",
    "git commit -a -m x",
    "git commit -am x",
    "git rebase main",
    "git merge feature",
    "git pull",
    "cd sub && git stash",
    "git -C . stash",
    "FOO=1 git reset --hard",
]
SAFE = [
    "git status",
    "git diff",
    "git diff --cached",
    "git log --oneline -5",
    "git show HEAD",
    "git stash list",
    "git add b.py",
    "git commit -m mine",
    "git commit -m mine -- b.py",
    "git checkout -b new-branch",
    "git clean -n",
    "git rebase --abort",
    "ls -la",
    "echo git stash",
]


@pytest.fixture
def shared(repo: Path, gcoord: Coordinator) -> Path:
    edit(gcoord, "other", "a.py", "a3\n", "A3 by other\n")  # another session's uncommitted work
    edit(gcoord, "me", "b.py", "b2\n", "B2 by me\n")  # the caller's own
    return repo


@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_destructive_commands_are_refused(shared: Path, command: str) -> None:
    refusal = check_shell_command(command, str(shared), "me")
    assert refusal is not None
    assert "edit-coordinator commit --session me -m MSG" in refusal
    assert "a.py (other)" in refusal


def test_the_advice_names_the_exact_command_the_hooks_use(shared: Path) -> None:
    """A bare `edit-coordinator` in the agent's shell may be another installation, or none: the advice names
    this installation's command by absolute path, as `init` writes it into the hooks."""
    import shlex

    from coordinator.git.guard import cli_argv

    refusal = check_shell_command("git add -A", str(shared), "me")
    assert refusal is not None and os.path.isabs(cli_argv()[0])
    assert f"`{shlex.join(cli_argv())} commit --session me -m MSG`" in refusal


@pytest.mark.parametrize("command", SAFE)
def test_read_only_and_own_commands_pass(shared: Path, command: str) -> None:
    assert check_shell_command(command, str(shared), "me") is None


def test_a_clean_shared_tree_allows_everything(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "me", "b.py", "b2\n", "B2\n")
    for command in ("git stash", "git add -A", "git commit -am x", "git reset --hard"):
        assert check_shell_command(command, str(repo), "me") is None


def test_a_change_made_outside_the_coordinator_counts_as_others(repo: Path) -> None:
    (repo / "a.py").write_text("changed by a person\n")
    refusal = check_shell_command("git stash", str(repo), "me")
    assert refusal is not None and "outside the coordinator" in refusal


def test_not_a_repository_passes(tmp_path: Path) -> None:
    assert check_shell_command("git stash", str(tmp_path), "me") is None


def test_invocations_are_found_in_compound_lines() -> None:
    assert git_invocations("git status && git -c a=b add -A; echo x | git log") == [
        ["status"],
        ["add", "-A"],
        ["log"],
    ]
    assert git_invocations("echo 'unbalanced") == []


# Issue 42's reproductions: the forms agents emit, read by the shell parser and git's own grammar. Each was
# allowed by the word-splitting guard (shlex at the start of the line).
MISSED_VARIANTS = [
    "echo start\ngit stash",  # a newline separator
    "bash -lc 'git stash'",  # how Codex wraps every command
    'bash -lc "cd . && git add -A"',
    'sh -c "git stash"',
    "(git stash)",
    "git commit -m x a.py",  # pathspecs without --
    "git commit -m x .",
    "git add -Av",  # clustered flags
    "git add *",  # a shell glob
    "git add '*.py'",  # a git glob
    "git add :/",  # whole-tree pathspec magic
    "git restore :/",
    "git restore ':(top)a.py'",
    "git checkout -f",
    "git add ':!b.py'",
    "git rm -f a.py",  # another session's file
    "git mv a.py c.py",
    "git stash push -- a.py",
    "git commit -am 'x'",
]
WRAPPED_FORMS = [
    "env git stash",
    "command git stash",
    "time git stash",
    "sudo git stash",
    "nohup git stash",
    "exec git stash",
    "echo a.py | xargs git add",
    "{ git stash; }",
    "if true; then git stash; fi",
    "git -c alias.x=stash x",
    "echo $(git stash)",
    "echo `git stash`",
    "env -i FOO=1 timeout 10 nice git reset --hard",
    "cat > notes.md <<'EOF' && git add -A\nnotes\nEOF",  # a command after a here-document's start
    "watch git stash",  # watch runs its words again and again through sh -c
    "watch -n 5 'git add -A'",
]
# Forms that overwrite a changed file that were allowed: a forced move onto it, and plumbing writing the tree.
OVERWRITING = [
    "git mv -f b.py a.py",
    "git checkout-index -a -f",
    "git checkout-index -f -- a.py",
    "git read-tree --reset -u HEAD",
]
NOT_OVERWRITING = [
    "git mv b.py c.py",
    "git checkout-index -a",
    "git read-tree -m -u HEAD",
    "git checkout-index -f b.py",
]
HARMLESS = [
    "git status",
    "git diff",
    "git log",
    "git add b.py",
    "git commit -m x -- b.py",
    "git commit -m x b.py",
    "git rm --cached -q b.py && git status",
    "bash -lc 'git status && git diff'",
    "git -c alias.st=status st",
    "git restore --staged a.py",
    "git stash list",
    "git checkout -b feature",
    "cd /tmp && ls",
]


@pytest.mark.parametrize("command", MISSED_VARIANTS + WRAPPED_FORMS)
def test_forms_agents_emit_are_refused(shared: Path, command: str) -> None:
    refusal = check_shell_command(command, str(shared), "me")
    assert refusal is not None, command
    assert "a.py (other)" in refusal and "edit-coordinator commit --session me -m MSG" in refusal


@pytest.mark.parametrize("command", HARMLESS)
def test_harmless_forms_pass(shared: Path, command: str) -> None:
    assert check_shell_command(command, str(shared), "me") is None


def test_codex_and_claude_code_shapes(shared: Path) -> None:
    codex = "bash -lc \"cd . && apply_patch <<'EOF'\n*** Begin Patch\n*** End Patch\nEOF\ngit add -A\""
    assert check_shell_command(codex, str(shared), "me") is not None
    claude = 'cd sub && git add -A && git commit -m "Fix it"'
    (shared / "sub").mkdir()
    assert check_shell_command(claude, str(shared), "me") is not None
    assert (
        check_shell_command('cd sub && git add ../b.py && git commit -m "mine" -- ../b.py', str(shared), "me") is None
    )


def test_a_pathspec_in_a_subfolder_is_resolved_from_there(shared: Path) -> None:
    (shared / "sub").mkdir()
    assert check_shell_command("cd sub && git add .", str(shared), "me") is None  # nothing of others' there
    assert check_shell_command("git -C sub add :/", str(shared), "me") is not None


def test_what_cannot_be_judged_is_named(shared: Path) -> None:
    answer = judge_shell_command("./deploy.sh && git unknownthing", str(shared), "me")
    assert answer.refusal is None
    assert any("deploy.sh" in d for d in answer.doubts)
    assert any("alias from the user's git config" in d for d in answer.doubts)
    eval_answer = judge_shell_command('eval "$CMD"', str(shared), "me")
    assert any("eval" in d for d in eval_answer.doubts)


def test_an_alias_from_the_repository_config_is_expanded(shared: Path) -> None:
    git(shared, "config", "alias.save", "stash")
    git(shared, "config", "alias.wipe", "!git reset --hard")
    assert check_shell_command("git save", str(shared), "me") is not None
    assert check_shell_command("git wipe", str(shared), "me") is not None


def test_git_guard_takes_the_command_as_one_argument(shared: Path) -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "coordinator.cli", "git-guard", "--root", str(shared), "--session", "me", "--"]
    one = subprocess.run([*base, "git stash"], cwd=shared, capture_output=True, text=True)
    assert one.returncode == 1 and "a.py (other)" in one.stderr
    words = subprocess.run([*base, "git", "status"], cwd=shared, capture_output=True, text=True)
    assert words.returncode == 0, words.stderr


@pytest.mark.parametrize(
    ("command", "named"), [("git status", None), ("git stash", "a.py (other)"), ("git add b.py", "b.py (me)")]
)
def test_git_guard_without_a_session_owns_nothing(shared: Path, command: str, named: str | None) -> None:
    """A person's shell or a script with no session: read-only commands run, and every uncommitted change is
    another's (b.py, the session me's, too). It used to refuse every command, `git status` included, for
    want of --session."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "EDIT_COORDINATOR_SESSION"}
    argv = [sys.executable, "-m", "coordinator.cli", "git-guard", "--root", str(shared), "--", command]
    done = subprocess.run(argv, cwd=shared, capture_output=True, text=True, env=env)
    assert done.returncode == (0 if named is None else 1), done.stderr
    if named:
        assert "commit --session S -m MSG" in done.stderr and named in done.stderr


@pytest.fixture
def nested(shared: Path, gcoord: Coordinator) -> Path:
    """`shared` with sub/x.py committed, then changed by the other session."""
    (shared / "sub").mkdir()
    (shared / "sub" / "x.py").write_text("x1\n")
    git(shared, "add", "sub/x.py")
    git(shared, "commit", "-q", "-m", "x", "--", "sub/x.py")
    edit(gcoord, "other", "sub/x.py", "x1\n", "X1 by other\n")
    return shared


ABSOLUTE_REFUSED = [
    "cd {repo} && git checkout -- a.py",  # Claude Code's usual shape: an absolute `cd`
    "cd {repo}/sub && git restore x.py",
    "cd {repo}/sub && git checkout -- ../a.py",
    "git checkout -- {repo}/a.py",
    "git -C {repo} restore a.py",
    "git -C {repo}/sub rm -f x.py",
    "cd {link} && git checkout -- a.py",  # the repository through a symbolic link
]
ABSOLUTE_ALLOWED = [
    "cd {repo} && git add b.py && git commit -m x -- b.py",
    "git add {repo}/b.py",
    "cd {repo}/sub && git status && git diff",
]


@pytest.mark.parametrize("command", ABSOLUTE_REFUSED)
def test_absolute_folders_and_paths_are_taken_relative_to_the_tree(nested: Path, command: str) -> None:
    """These were allowed: an absolute folder or path was compared with the others' paths as written."""
    (nested.parent / "link").symlink_to(nested)
    line = command.format(repo=nested, link=nested.parent / "link")
    refusal = check_shell_command(line, str(nested), "me")
    assert refusal is not None and "(other)" in refusal, line


@pytest.mark.parametrize("command", ABSOLUTE_ALLOWED)
def test_absolute_forms_of_own_and_read_only_commands_pass(nested: Path, command: str) -> None:
    assert check_shell_command(command.format(repo=nested), str(nested), "me") is None


def test_the_hook_judges_a_command_from_the_agents_folder(nested: Path, gcoord: Coordinator) -> None:
    """An agent's shell stays in the folder it moved to (Claude Code's `cwd` of the event): `git checkout --
    x.py` run in sub/ discards sub/x.py. The hook used to judge it from the root, where x.py is nobody's."""
    from coordinator.agents.adapter import HookAdapter
    from tests.coordinator.agents.hooking import payload, run

    hooks = HookAdapter(gcoord)
    ids = {"session_id": "me", "tool_use_id": "toolu_cwd_1"}
    answer = run(
        hooks, payload("pre_bash", nested, cwd=str(nested / "sub"), tool_input__command="git checkout -- x.py", **ids)
    )
    assert not answer.allow and "sub/x.py (other)" in answer.reason
    at_root = payload("pre_bash", nested, tool_input__command="git checkout -- x.py", **ids)
    assert run(hooks, at_root).allow  # from the root it names x.py, which does not exist: nothing of others'


@pytest.mark.parametrize("line", ['cd "$DIR" && git checkout -- x.py', 'git -C "$DIR" checkout -- x.py'])
def test_a_folder_not_known_before_it_runs_is_named(nested: Path, line: str) -> None:
    """`git -C "$DIR"` was taken as a folder named `$DIR`, silently."""
    answer = judge_shell_command(line, str(nested), "me")
    assert any("folder not known" in d for d in answer.doubts)


def test_brace_expansion_is_expanded_as_the_shell_does(shared: Path) -> None:
    """`a.{py,txt}` was matched as one pattern, which names no file: the shell makes a.py and a.txt of it."""
    refusal = check_shell_command("git restore -- a.{py,txt}", str(shared), "me")
    assert refusal is not None and "a.py (other)" in refusal
    assert check_shell_command("git checkout -- {c,{d,a}}.py", str(shared), "me") is not None
    assert check_shell_command("git add {b,c}.py && git commit -m x -- {b,c}.py", str(shared), "me") is None


@pytest.mark.parametrize("line", ["echo 'git stash' | sh", "cat <<EOF | bash\ngit stash\nEOF", "bash < steps.txt"])
def test_a_shell_running_what_is_piped_into_it_is_named(shared: Path, line: str) -> None:
    """The commands a shell reads from a pipe or a file are not seen: named, not silently passed. (A shell fed
    a here-document directly, `bash <<EOF`, is read: its commands are judged.)"""
    answer = judge_shell_command(line, str(shared), "me")
    assert answer.refusal is None
    assert any("runs commands read from its input" in d or "steps.txt" in d for d in answer.doubts), answer.doubts
    assert check_shell_command("bash <<'EOF'\ngit stash\nEOF", str(shared), "me") is not None


@pytest.mark.parametrize("command", OVERWRITING)
def test_forms_that_overwrite_a_changed_file_are_refused(shared: Path, command: str) -> None:
    refusal = check_shell_command(command, str(shared), "me")
    assert refusal is not None and "a.py (other)" in refusal


@pytest.mark.parametrize("command", NOT_OVERWRITING)
def test_their_forms_that_leave_a_changed_file_pass(shared: Path, command: str) -> None:
    """Without -f `checkout-index` skips an existing file and `read-tree -m -u` refuses to overwrite one."""
    assert check_shell_command(command, str(shared), "me") is None


def test_a_codex_patch_run_by_the_shell_has_the_rest_of_its_line_judged(shared: Path, gcoord: Coordinator) -> None:
    """Codex runs `apply_patch <<'EOF' ... EOF` as a shell command; its hook event is read as the patch's
    write, and the git commands after the patch on the same line were never shown to the guard."""
    import json

    from coordinator.agents import codex
    from coordinator.agents.adapter import HookAdapter

    data_dir = Path(__file__).resolve().parents[2] / "data" / "hooks" / "codex"
    hooks = HookAdapter(gcoord)
    patch = "*** Begin Patch\n*** Update File: b.py\n@@\n-b3\n+B3 by me\n*** End Patch\n"

    def pre(command: str) -> bool:
        data = json.loads((data_dir / "pre_bash.json").read_text().replace("__ROOT__", str(shared)))
        data.update(session_id="me", tool_use_id="call_patch")
        data["tool_input"]["command"] = command
        call = codex.parse(data)
        assert call is not None and call.kind == "write" and call.path == str(shared / "b.py")
        decision = hooks.handle(call)
        assert decision.allow or "a.py (other)" in decision.reason
        return decision.allow

    assert not pre(f"apply_patch <<'EOF'\n{patch}EOF\ngit add -A && git commit -m done")
    assert pre(f"apply_patch <<'EOF'\n{patch}EOF\ngit status")


def test_own_paths_in_a_folder_pass(nested: Path, gcoord: Coordinator) -> None:
    """The issue's harmless forms with a path in a folder (`git add path/file`, `git commit -m x -- own/file`)
    beside another session's change in the same folder."""
    (nested / "sub" / "mine.py").write_text("m1\n")
    git(nested, "add", "sub/mine.py")
    git(nested, "commit", "-q", "-m", "mine", "--", "sub/mine.py")
    edit(gcoord, "me", "sub/mine.py", "m1\n", "M1 by me\n")
    for line in ("git add sub/mine.py", "git commit -m x -- sub/mine.py", "cd sub && git add mine.py"):
        assert check_shell_command(line, str(nested), "me") is None, line
    refusal = check_shell_command("git add sub", str(nested), "me")  # the folder holds the other's sub/x.py
    assert refusal is not None and "sub/x.py (other)" in refusal


def test_the_hook_names_what_the_guard_let_run_without_judging(shared: Path, gcoord: Coordinator) -> None:
    """A line the guard cannot judge (a script of the tree) runs, and the hook's answer names it to the model
    (before, only `git-guard` and a refusal named it); with no other session's work there is nothing to say."""
    from coordinator.agents.adapter import HookAdapter
    from tests.coordinator.agents.hooking import payload, run

    hooks = HookAdapter(gcoord)
    ids = {"session_id": "me", "tool_use_id": "toolu_doubt_1"}
    answer = run(hooks, payload("pre_bash", shared, tool_input__command="./deploy.sh && git status", **ids))
    assert answer.allow and "without judging" in answer.reason and "deploy.sh" in answer.reason
    plain = run(hooks, payload("pre_bash", shared, tool_input__command="git status", **ids))
    assert plain.allow and plain.reason == ""
