"""`edit-coordinator stress`: its exit status and its wording say what happened.

- The verdict rule (`worker.verdict.judge`), case by case: no work, every call refused, loss through the
  coordinator, `--unsafe` with and without loss, a crashed worker.
- Real processes: `stress` against a Redis that is not there exits 2 before starting a worker and says
  why; `--unsafe` exits 0 and says plainly that edits were lost; the report explains its rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import REPO_ROOT
from worker.verdict import FAULT, NO_WORK, OK, judge

ROOT = REPO_ROOT


@dataclass
class _Report:
    ok: bool = True
    lost_updates: int = 0
    verified: int = 0
    torn_files: list[str] = field(default_factory=list)
    torn_reads: int = 0
    details: list[str] = field(default_factory=list)


def _summary(attempts: int, acked: int, refused: dict[str, int] | None = None, **kw: Any) -> dict[str, Any]:
    return {"attempts": attempts, "acknowledged": acked, "refused": refused or {}, "reads": kw.get("reads", attempts)}


def test_a_run_that_did_nothing_fails() -> None:
    v = judge(_summary(0, 0, reads=0), _Report(), unsafe=False)
    assert v.exit_code == NO_WORK and not v.passed
    assert "Nothing was done" in v.headline


def test_a_run_whose_every_call_was_refused_fails_and_names_the_cause() -> None:
    v = judge(_summary(40, 0, {"state_unavailable": 40}), _Report(), unsafe=False)
    assert v.exit_code == NO_WORK
    assert "Nothing was acknowledged" in v.headline and "state_unavailable: 40" in v.headline
    assert "--redis-url" in v.hint
    # Reads refused before any edit was tried (the cluster-node case): still no work.
    v = judge(
        {"attempts": 0, "acknowledged": 0, "refused": {}, "reads": 7, "reads_refused": 7}, _Report(), unsafe=False
    )
    assert v.exit_code == NO_WORK and "7 reads refused" in v.headline


def test_loss_through_the_coordinator_is_a_failure() -> None:
    v = judge(_summary(100, 80), _Report(ok=False, lost_updates=3, verified=80), unsafe=False)
    assert v.exit_code == FAULT and v.headline.startswith("FAILED") and "3 of 80" in v.headline
    v = judge(_summary(100, 80), _Report(ok=False, torn_reads=2, verified=80), unsafe=False)
    assert v.exit_code == FAULT and "2 read(s) saw a torn file" in v.headline
    # Any other fault the oracle found (a write nobody made, a lock left held) fails the run as well.
    other = _Report(ok=False, details=["stress/c00.txt: a lock is still held"])
    v = judge(_summary(100, 80), other, unsafe=False)
    assert v.exit_code == FAULT and "a lock is still held" in v.headline


def test_a_clean_run_passes() -> None:
    v = judge(_summary(100, 80, {"stale": 20}), _Report(verified=80), unsafe=False)
    assert v.exit_code == OK and v.passed and "all 80 acknowledged edits" in v.headline


def test_unsafe_passes_when_it_demonstrates_loss_and_says_so() -> None:
    v = judge(_summary(1000, 1000), _Report(ok=False, lost_updates=700, verified=1000), unsafe=True)
    assert v.exit_code == OK
    assert "As intended" in v.headline and "700 of 1,000 acknowledged edits were lost (70%)" in v.headline


def test_unsafe_without_loss_is_not_a_pass() -> None:
    v = judge(_summary(10, 10), _Report(verified=10), unsafe=True)
    assert v.exit_code == FAULT and "lost nothing this time" in v.headline and "--workers" in v.hint


def test_a_crashed_worker_invalidates_the_run() -> None:
    v = judge(_summary(100, 80), _Report(verified=80), unsafe=False, worker_errors=["Traceback ..."])
    assert v.exit_code == NO_WORK and "crashed" in v.headline


# --- real processes ----------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stress(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "stress", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_stress_against_an_unreachable_redis_exits_2_with_a_clear_message() -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    p = _stress("--redis-url", url, "--duration", "1", "--workers", "2")
    assert p.returncode == NO_WORK, (p.stdout, p.stderr)
    err = " ".join(p.stderr.split())
    assert "state_unavailable" in err and url in err and "No worker was started" in err
    assert "OK" not in p.stdout and "LOST UPDATES" not in p.stdout  # no report of a run that did not happen


def test_unsafe_run_exits_0_and_says_plainly_that_edits_were_lost() -> None:
    p = _stress("--unsafe", "--workers", "6", "--files", "1", "--edits", "300", "--think-ms", "0")
    out = " ".join(p.stdout.split())
    assert p.returncode == OK, (p.stdout, p.stderr)
    assert "WITHOUT the coordinator" in out
    assert "As intended, --unsafe demonstrated" in out and "acknowledged edits were lost" in out
    assert "OK:" not in out


def test_report_explains_its_rows_and_the_json_carries_the_verdict() -> None:
    p = _stress("--workers", "2", "--edits", "20", "--workload", "hot-line", "--think-ms", "0")
    out = " ".join(p.stdout.split())
    assert p.returncode == OK, (p.stdout, p.stderr)
    assert "conflict rate = stale / attempts" in out and "acknowledged edits in the files" in out
    assert "OK: all" in out and "exit status 0" in out
    p = _stress("--workers", "2", "--edits", "10", "--think-ms", "0", "--json")
    verdict = json.loads(p.stdout)["verdict"]
    assert p.returncode == verdict["exit_code"] == OK and verdict["headline"].startswith("OK")


def test_help_gives_the_legend_and_the_exit_status_once_per_default() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "stress", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    text = " ".join(p.stdout.split())
    assert p.returncode == 0
    assert "conflict rate refused as stale / attempts" in text and "Exit status: 0 when" in text
    assert "With --unsafe" in text and "(default: None)" not in text and "(default: False)" not in text


def test_bench_fails_a_coordinator_cell_that_acknowledged_nothing() -> None:
    from coordinator_bench.cli import idle_coordinator_cells

    def result(acked: list[int], kind: str = "coordinator", skipped: bool = False) -> dict[str, Any]:
        return {
            "scenario": {"name": "hot"},
            "skipped": skipped,
            "columns": [{"name": "strict-none", "kind": kind}],
            "cells": [{"row": "16", "column": "strict-none", "reps": [{"acknowledged": n} for n in acked]}],
        }

    assert idle_coordinator_cells([result([120, 0, 95])]) == ["hot/16/strict-none"]
    assert idle_coordinator_cells([result([120, 95])]) == []
    assert idle_coordinator_cells([result([0], kind="unsafe")]) == []  # a baseline is not judged so
    assert idle_coordinator_cells([result([0], skipped=True)]) == []


def test_ctrl_c_prints_the_report_of_the_run_so_far_and_exits_non_zero(tmp_path: Path) -> None:
    """SIGINT while the fleet runs (as Ctrl-C sends it to the foreground process): the workers stop, the
    oracle judges what they did, the report is printed, and the exit status says the run was cut short."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    argv = ["stress", "--workers", "2", "--duration", "300", "--durability", "none", "--think-ms", "1"]
    p = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(f.stat().st_size for f in tmp_path.glob("ec-stress-run-*/records/*.jsonl")):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    text = " ".join(out.split())
    assert p.returncode == 130, (out, err)
    assert "Interrupted after" in text and "the report covers the run so far" in text
    assert re.search(r"acknowledged\W+[1-9]", text) and re.search(r"LOST UPDATES\W+0\b", text)
    assert "exit status 130" in text
    assert not list(tmp_path.glob("ec-stress-*"))  # the scratch folders are removed as after a full run


def test_a_run_against_a_service_writes_only_under_its_ignored_folder(tmp_path: Path) -> None:
    """`stress --url ... --in-place` (mixed: it also creates files) leaves nothing outside stress-runs/<run>/,
    and stress-runs/ holds a .gitignore that ignores it all."""
    from coordinator.state.embedded import stop_embedded_redis
    from tests.coordinator.server.test_server import ServerProcess, token

    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text("print('mine')\n")
    server = ServerProcess(root)
    try:
        remote = ["--url", server.url, "--token", token(admin=True), "--in-place", "--workers", "2"]
        p = _stress(*remote, "--workload", "mixed", "--edits", "60", "--think-ms", "0")
        assert p.returncode == 0, p.stderr
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")
    assert sorted(os.listdir(root)) == [".edit-coordinator", "app.py", "stress-runs"]
    assert (root / "stress-runs" / ".gitignore").read_text() == "*\n"
    runs = [p for p in (root / "stress-runs").iterdir() if p.name != ".gitignore"]
    assert len(runs) == 1 and any((runs[0] / "created").iterdir())  # the created files are in the run's folder
    assert f"stress-runs/{runs[0].name}/" in p.stderr
