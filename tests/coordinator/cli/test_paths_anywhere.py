"""One rule for a PATH: every command resolves it as `read` does (relative to the current folder inside the
root, found upwards), and a path that names nothing is refused with `file_not_found` (exit status 3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.cli import main
from coordinator.state.embedded import stop_embedded_redis
from tests.conftest import coordinator_for


@pytest.fixture
def written(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A root with src/a.txt written twice by session `alice` and src/plain.txt that no session wrote; the
    current folder is src/."""
    for name in ("EDIT_COORDINATOR_ROOT", "EDIT_COORDINATOR_SESSION", "EDIT_COORDINATOR_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    (root / ".git").mkdir()
    (root / "src").mkdir()
    (root / "src" / "plain.txt").write_text("one\ntwo\n")
    c: Coordinator = coordinator_for(root, None)
    s = c.session("alice")
    s.write("src/a.txt", "first\n")
    s.edit("src/a.txt", "first", "second")
    c.close()
    monkeypatch.chdir(root / "src")
    yield root
    stop_embedded_redis(root / ".edit-coordinator")  # none should start (nothing here writes); if one did


def test_history_from_a_subfolder_lists_the_file_there(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "a.txt", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == "src/a.txt"
    assert [e["version"] for e in out["entries"]] == [2, 1]


def test_blame_from_a_subfolder_names_the_writer(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["blame", "a.txt"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("alice") and "second" in out


def test_undo_dry_run_from_a_subfolder_finds_the_write(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["undo", "a.txt", "--dry-run"]) == 0
    assert "Would revert the edit of version 2 of src/a.txt by alice" in capsys.readouterr().out


def test_restore_dry_run_from_a_subfolder(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["restore", "a.txt", "--to", "1", "--dry-run"]) == 0
    assert "src/a.txt versions: 2 (edit by alice)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "missing.txt"],
        ["blame", "missing.txt"],
        ["undo", "missing.txt"],
        ["undo", "missing.txt", "--dry-run"],
        ["redo", "missing.txt"],
        ["restore", "missing.txt", "--to", "0", "--dry-run"],
    ],
)
def test_a_missing_path_is_a_path_error(written: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "[file_not_found]" in err and "src/missing.txt does not exist" in err


def test_a_path_at_the_root_from_a_subfolder_is_named_from_there(
    written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plain.txt` in src/ is src/plain.txt, not a root-level plain.txt (which does not exist)."""
    assert main(["history", "plain.txt"]) == 0
    assert "No recorded writes of src/plain.txt" in capsys.readouterr().out


def test_blame_of_a_file_without_history_says_so(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["blame", "plain.txt"]) == 0
    captured = capsys.readouterr()
    assert "No recorded writes of src/plain.txt" in captured.err
    assert "2 line(s)" in captured.err
    assert captured.out.count("\n") == 2


def test_blame_with_history_adds_no_note(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["blame", "a.txt"]) == 0
    assert capsys.readouterr().err == ""
