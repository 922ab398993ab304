"""The README says what works: every command line it gives is one the command-line parser takes, and every
command it says works from anywhere with `--server URL --token T` takes those options."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from coordinator.cli import build_parser
from tests import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def _command_lines() -> list[str]:
    """The `edit-coordinator ...` commands of the README: each line of its bash blocks (what follows the
    program's name, up to a `#` comment or `&&`), and each inline code span that starts with the name."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.DOTALL):
        for line in block.splitlines():
            _, name, rest = line.partition("edit-coordinator ")
            if name:
                found.append(re.split(r"\s#\s|\s&&\s", rest)[0].strip())
    found += re.findall(r"`edit-coordinator ([^`]+)`", README)
    return found


def _parses(words: list[str]) -> bool:
    try:
        build_parser().parse_args(words)
    except SystemExit as done:  # --help and --version end the parse with 0
        return done.code == 0
    return True


def test_the_readme_names_its_commands() -> None:
    lines = _command_lines()
    for expected in ("stress", "init claude-code", "serve", "token --viewer --ttl 28800", "status"):
        assert any(line.startswith(expected) for line in lines), (expected, lines)


@pytest.mark.parametrize("line", _command_lines())
def test_every_command_line_of_the_readme_parses(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _parses(shlex.split(line)), (line, capsys.readouterr().err)


def _command_names() -> set[str]:
    import argparse

    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _remote_commands() -> list[list[str]]:
    """The commands of the README's sentence on inspecting from anywhere with --server: its code spans
    that start with a command's name, up to the sentence that names what works in the repository only."""
    start = README.index("anywhere with `--server URL --token T`")
    end = min(i for i in (README.find("In the repository only", start), README.index("\n\n", start)) if i > 0)
    names = _command_names()
    commands = []
    for span in re.findall(r"`([^`]+)`", README[start:end]):
        words = shlex.split(span)
        words = words[1:] if words[0] == "edit-coordinator" else words
        if words[0] in names:
            commands.append(words)
    return commands


def test_what_the_readme_says_works_with_server_takes_server(capsys: pytest.CaptureFixture[str]) -> None:
    """The README said `blame` and `undo` worked from anywhere with --server; neither takes the option."""
    commands = _remote_commands()
    for words in commands:
        argv = [*words, "--server", "http://h:1", "--token", "t"]
        assert _parses(argv), (argv, capsys.readouterr().err)
    assert {c[0] for c in commands} >= {"status", "top", "watch", "history", "leases"}, commands


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    """The first section's two commands: the second is the test command .ci/run runs first, word for word."""
    section = README[README.index("## Two commands") : README.index("\n## ", README.index("## Two commands") + 1)]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    install, tests = (re.split(r"\s+#\s", line)[0].strip() for line in block.strip().splitlines())
    assert install.startswith("python3 -m pip install -e . && edit-coordinator stress"), install
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in [line.strip() for line in ci.splitlines()], tests


def test_the_readme_library_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Python block, run as written on a repository holding the file it edits."""
    from coordinator.state.embedded import stop_embedded_redis

    (block,) = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    assert '"/path/to/repo"' in block
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("TIMEOUT = 30\n")
    try:
        exec(compile(block.replace('"/path/to/repo"', repr(str(tmp_path))), "README.md", "exec"), {})
    finally:
        stop_embedded_redis(tmp_path / ".edit-coordinator")
    assert (tmp_path / "src" / "app.py").read_text() == "TIMEOUT = 60\n"
    assert capsys.readouterr().out == ""  # no refusal printed
