"""Small things people notice: output read by `head` ends quietly; the stress report's title fits 80 columns;
the bench's advice works from an installed wheel."""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import REPO_ROOT


def _head_one_line(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run the command with its output read by something that stops after one line (as `| head -1` does)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read().decode()
    return proc.wait(timeout=60), err


@pytest.mark.parametrize("argv", [["blame", "big.txt"], ["--help"], ["history", "--help"]])
def test_output_read_by_head_ends_without_a_traceback(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "big.txt").write_text("".join(f"line {i} " + "x" * 60 + "\n" for i in range(20_000)))
    code, err = _head_one_line(argv, tmp_path)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == 0


def test_watch_and_init_read_by_head_end_without_a_traceback(tmp_path: Path) -> None:
    """The issue's other two: `watch` (here its --last replay) and `init` (its list of what it added)."""
    from coordinator import Coordinator
    from coordinator.state.embedded import stop_embedded_redis

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f.txt").write_text("0\n")
    try:
        with Coordinator(str(tmp_path)) as coord:
            s = coord.session("s")
            for i in range(1, 40):
                s.read("f.txt")
                s.write("f.txt", f"{i}\n")
        for argv in (["init", "codex"], ["watch", "--last", "40", "--timeout", "0.2"]):
            code, err = _head_one_line(argv, tmp_path)
            assert "Traceback" not in err and "BrokenPipe" not in err, (argv, err)
            assert code == 0, (argv, err)
    finally:
        stop_embedded_redis(tmp_path / ".edit-coordinator")


def test_the_stress_title_fits_80_columns(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.stress import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--workers", "12", "--edits", "24", "--workload", "hot-line", "--think-ms", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("stress: "))
    assert lines[title].rstrip().endswith(" s") and len(lines[title]) <= 80  # one line, not wrapped
    assert any("through the coordinator" in line for line in lines[title + 1 : title + 4])


def test_the_plot_advice_names_the_installed_package() -> None:
    from coordinator_bench.plots import MISSING_MATPLOTLIB

    assert 'pip install "edit-coordinator[bench]"' in MISSING_MATPLOTLIB


def test_help_texts_have_one_form(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The exit-status table is in `edit-coordinator --help` alone, wrapped; a command's own help points there;
    `commit --session` is shown as required when no variable gives it."""
    from coordinator.cli import main

    monkeypatch.delenv("EDIT_COORDINATOR_SESSION", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert top.count("exit statuses:") == 1 and max(len(line) for line in top.splitlines()) <= 110
    for command in (["read"], ["leases"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        own = capsys.readouterr().out
        assert "  7    the content" not in own and "`edit-coordinator --help` lists" in own
    with pytest.raises(SystemExit):
        main(["commit", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert " --session ID " in usage and "[--session ID]" not in usage


@pytest.mark.parametrize("columns", [80, 100])
def test_the_top_help_keeps_its_tables_at_any_width(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 80 columns the exit-status table's long rows went on at the left margin (under the status, not its
    text) and the config paragraph's lines were cut where they had been cut for 100 (a ragged line, then a
    short one); its folder name was split at a hyphen."""
    import re

    from coordinator.cli import main

    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    table = out[out.index("exit statuses:\n") :].split("\n\n")[0].splitlines()[1:]
    assert table and all(re.match(r"  \d+ +\S|       \S", line) for line in table), table
    config = out[out.index("project config:") :].split("\n\n")[0].splitlines()
    width = columns - 2
    for line, after in itertools.pairwise(config):  # filled: the next word would not have fit
        if not after.startswith("  The root"):
            assert len(line) + 1 + len(after.split()[0]) > width, (line, after)
    assert all(len(line) <= width for line in out.splitlines() if line), out
    assert ".edit-\n" not in out and "auto-commit" in out


def _parsers(parser: argparse.ArgumentParser, prog: str = "edit-coordinator") -> Iterator[tuple[str, Any]]:
    """The parser and every subcommand's, nested ones too, by their command line."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{prog} {name}")


@pytest.mark.parametrize("columns", ["200", "80"])
def test_every_help_fits_100_columns(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    """Every command's --help (formatted in process, as `--help` prints it) wraps at 100 columns however wide
    the terminal is, and within it when it is narrower; at 0baa582 a wide terminal widened them all and
    some descriptions and epilogs kept lines of 100-300 columns on any terminal."""
    from coordinator.cli import build_parser

    monkeypatch.setenv("COLUMNS", columns)
    limit = min(100, int(columns))
    too_long = {
        prog: [line for line in p.format_help().splitlines() if len(line) > limit]
        for prog, p in _parsers(build_parser())
    }
    assert len(too_long) > 20  # every command was formatted
    assert {prog: lines for prog, lines in too_long.items() if lines} == {}


@pytest.mark.parametrize("command", [["leases", "list"], ["watch", "--timeout", "0.1"]])
def test_inspecting_a_root_no_coordinator_used_creates_nothing(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a Redis URL given, a root without a state folder has nothing in it to see: the command says so
    without connecting (the URL here answers nothing) and creates no state folder."""
    from coordinator.cli import main

    code = main([*command, "--root", str(tmp_path), "--redis-url", "redis://127.0.0.1:1/0"])
    out = capsys.readouterr()
    assert "No coordinator has used" in out.out + out.err and "it has no state folder" in out.out + out.err
    assert code == (0 if command[0] == "leases" else 5)
    assert not (tmp_path / ".edit-coordinator").exists()
