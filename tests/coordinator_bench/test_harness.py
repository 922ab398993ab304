"""coordinator_bench/harness.py, the one set-up of the suite and the measuring scripts: the slot editor's
edits and its check, the scratch folder's clean-up (its embedded Redis servers stopped), the empty service,
the per-edit instruction arithmetic, percentiles, tables and revision folders."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.state.embedded import embedded_status
from coordinator_bench import harness


def test_the_editor_increments_slot_lines_in_turn_and_the_file_holds_them(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    def edit(path: str, old: str, new: str) -> None:
        calls.append((old, new))
        f = tmp_path / path
        f.write_text(f.read_text().replace(old, new, 1))

    editor = harness.SlotEditor("f.txt", edit, slots=3)
    editor.write_file(tmp_path)
    for _ in range(4):
        editor.step()
    assert calls[:2] == [("\ns000 = 0\n", "\ns000 = 1\n"), ("\ns001 = 0\n", "\ns001 = 1\n")]
    assert calls[3] == ("\ns000 = 1\n", "\ns000 = 2\n")
    assert editor.values == [2, 1, 1] and editor.landed(tmp_path)
    editor.check(tmp_path)


def test_an_acknowledged_edit_missing_from_the_file_fails_the_check(tmp_path: Path) -> None:
    editor = harness.SlotEditor("f.txt", lambda path, old, new: None)  # acknowledges, writes nothing
    editor.write_file(tmp_path)
    editor.step()
    assert not editor.landed(tmp_path)
    with pytest.raises(SystemExit, match="does not hold the 1 edits acknowledged"):
        editor.check(tmp_path)


def test_the_scratch_folder_stops_every_repositorys_redis_and_goes(tmp_path: Path) -> None:
    with harness.scratch("ec-test-", git=True) as sc:
        other = sc.repo("other")
        sc.redis_url()
        sc.redis_url(other)
        pids = [sc.redis_pid(), sc.redis_pid(other)]
        assert (sc.root / ".git").is_dir() and pids[0] != pids[1]
        states = [root / STATE_DIR_NAME for root in sc.roots]
        work = sc.work
    assert not work.exists()
    assert not any(_running(pid) for pid in pids)
    assert all(embedded_status(state) is None for state in states)


def test_the_empty_service_answers_its_body_to_any_request(tmp_path: Path) -> None:
    answer = json.dumps({"snippet": "x" * 50}).encode()
    with harness.empty_service(tmp_path, answer) as (url, pid):
        request = urllib.request.Request(url + "/v1/edit", data=b'{"a": 1}', method="POST")
        with urllib.request.urlopen(request, timeout=10) as got:
            assert got.status == 200 and got.read() == answer
    assert not _running(pid)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a stopped child this process has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_instructions_per_edit_is_the_difference_of_two_runs() -> None:
    counts = {10: 1_000_000 + 10 * 500, 40: 1_000_000 + 40 * 500}  # start-up plus 500 per edit
    assert harness.instructions_per_edit(counts.__getitem__, 40) == 500.0
    with pytest.raises(ValueError):
        harness.instructions_per_edit(counts.__getitem__, 1)


def test_a_count_missing_from_valgrinds_output_is_an_error(tmp_path: Path) -> None:
    fake = tmp_path / "valgrind"
    fake.write_text("#!/bin/sh\necho 'no summary' >&2\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    with pytest.raises(RuntimeError, match="x failed under valgrind"):
        harness.instructions_of(["true"], env, "x")


def test_percentiles_are_the_projects_in_milliseconds() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert harness.ms(values, 50) == pytest.approx(50.5)
    assert harness.ms(values, 100) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        harness.ms([], 50)


def test_the_markdown_table() -> None:
    assert harness.markdown_table(["a", "b"], [[1, "x"], [2.5, ""]]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | |\n"


def test_a_folder_without_the_package_is_no_revision_tree(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no coordinator package"), harness.revision_tree(str(tmp_path)):
        pass
    with pytest.raises(SystemExit, match="neither a folder nor a revision"), harness.revision_tree("no-such-rev-x"):
        pass
