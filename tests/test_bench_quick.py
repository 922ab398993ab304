"""`edit-coordinator bench --quick` as a smoke test: the suite runs end to end, and the oracle is satisfied.

Properties guarded here (no speed is asserted):
- the quick suite runs its cells through every column (baselines and coordinator) and writes one JSON per
  scenario, with the machine, versions and commit, plus the plots;
- the oracle finds no lost update in any coordinator cell, and does find some for `unsafe` in the
  contended cell (it is not blind);
- `bench --report` writes the generated part between the markers and leaves the rest of the file alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator_bench.report import BEGIN, END, HEADING, splice


def _coordinator_lost(result: dict) -> int:
    coord = {c["name"] for c in result["columns"] if c["kind"] in ("coordinator", "http")}
    return sum(r["lost_updates"] for c in result["cells"] if c["column"] in coord for r in c["reps"])


def test_quick_suite_runs_and_loses_nothing_through_the_coordinator(tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = main(["bench", "--quick", "--out", str(out), "--scenario", "solo", "--scenario", "hot", "--duration", "0.6"])
    assert code == 0, "the oracle found a lost update in a coordinator cell (exit 1) or the suite failed"

    results = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(results) == {"solo", "hot"}
    for res in results.values():
        assert res["machine"]["cpus"] and res["versions"]["python"] and "commit" in res["commit"]
        kinds = {c["kind"] for c in res["columns"]}
        assert {"unsafe", "naive-lock", "coordinator"} <= kinds
        for c in res["cells"]:
            for r in c["reps"]:
                assert not r["worker_errors"], r["worker_errors"]
                assert r["attempts"] > 0, (c["row"], c["column"])
        assert _coordinator_lost(res) == 0
        coord_cells = [c for c in res["cells"] if c["column"].startswith("strict-")]
        assert coord_cells and all(r["oracle"]["ok"] for c in coord_cells for r in c["reps"])
    unsafe_hot = [c for c in results["hot"]["cells"] if c["column"] == "unsafe"]
    assert unsafe_hot and unsafe_hot[0]["reps"][0]["lost_updates"] > 0, "the oracle should see unsafe lose updates"
    assert (out / "bench-throughput.png").stat().st_size > 0
    assert (out / "bench-latency-cdf.png").stat().st_size > 0

    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\nHand-written text stays.\n")
    assert main(["bench", "--report", "--out", str(out), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert text.startswith("# Benchmarks\n\nHand-written text stays.\n")
    assert BEGIN in text and END in text and "### Targets" in text and "bench-throughput.png" in text


@pytest.mark.parametrize(
    "existing",
    [None, "# B\n", "# B\n\nbefore\n", f"# B\n\nbefore\n{HEADING}\n\n{BEGIN}\nold\n{END}\nafter\n"],
)
def test_report_splice_touches_only_the_generated_part(existing: str | None) -> None:
    new = splice(existing, "generated\n")
    assert new.count(BEGIN) == 1 and new.count(END) == 1 and new.count(HEADING) == 1
    inside = new[new.index(BEGIN) + len(BEGIN) : new.index(END)]
    assert inside == "\ngenerated\n"
    assert new[: new.index(BEGIN)].endswith(f"{HEADING}\n\n"), "the heading sits right before the markers"
    if existing is None:
        assert new.startswith("# Benchmarks\n")
    elif BEGIN in existing:
        assert new == f"# B\n\nbefore\n{HEADING}\n\n{BEGIN}\ngenerated\n{END}\nafter\n"
    else:
        assert new.startswith(existing), "text outside the markers is kept byte for byte"
    assert splice(new, "generated\n") == new
