"""`edit-coordinator bench --scenario cooperbench` on the fixture of tests/data/cooperbench (12 pairs of
CooperBench features, MIT): every mode replays every pair, nothing lands at a wrong place, nothing
acknowledged is lost, and the counts are the ones the patches and the merge rule give."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coordinator_bench import cooperbench
from coordinator_bench.cli import main as bench_main
from coordinator_bench.cooperdata import Block, load_tasks, parse_patch

DATA = Path(__file__).resolve().parents[1] / "data" / "cooperbench"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git (git merge-file)")


def _hunks_in_fixture() -> int:
    """Hunks the 12 pairs send: each feature's hunks, once per pair it is in, counted from the patch
    text itself (the ``@@`` lines), not with the scenario's parser."""
    total = 0
    for task in load_tasks(DATA / "dataset"):
        per_feature = [
            (DATA / "dataset" / task.key / f"feature{f.number}" / "feature.patch").read_text().count("\n@@ ")
            for f in task.features
        ]
        total += sum(per_feature) * (len(per_feature) - 1)
    return total


def test_the_scenario_replays_the_fixture_with_nothing_lost_or_misplaced(tmp_path: Path) -> None:
    code = bench_main(
        [
            "--scenario",
            "cooperbench",
            "--dataset",
            str(DATA / "dataset"),
            "--repos",
            str(DATA / "base"),
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    results = json.loads((tmp_path / "cooperbench" / "cooperbench.json").read_text())
    total = results["summary"]["all"]
    assert total["pairs"] == total["replayable"] == 12
    hunks = _hunks_in_fixture()
    for name, mode in total["modes"].items():
        assert mode["hunks"] == hunks, name
        assert mode["wrong_place"] == 0 and mode["lost"] == 0, (name, mode)
        assert mode["wrong_place_reread"] == 0 and mode["lost_reread"] == 0, (name, mode)
        assert mode["landed"] + sum(mode["final_refusals"].values()) == hunks, name
    modes = total["modes"]
    # strict refuses every edit made on a view another session's write has made old
    strict = modes["strict"]
    assert strict["full"] == 0 and strict["refusals"] == {"stale": hunks - strict["landed"]}
    # the merge rule lands every pair of the dspy task (git merge-file lands 3 of them), none of dirty-equals'
    dspy, dirty = results["summary"]["stanfordnlp/dspy"], results["summary"]["samuelcolvin/dirty-equals"]
    assert dspy["git merge-file"] == 3 and dspy["modes"]["rebase"]["full"] == 6
    assert dirty["modes"]["rebase"]["full"] == 0 and dirty["modes"]["rebase"]["refusals"] == {"stale:overlap": 9}
    # where git merges cleanly and both features landed, the files are git's merge, byte for byte
    assert modes["rebase"]["same_as_git"] == 3 and modes["rebase"]["differs_from_git"] == 0
    # without a coordinator, whole-file writes lose hunks in every pair where both features share a file
    assert results["summary"]["all"]["read-modify-write"]["lost"] > 0
    assert (tmp_path / "cooperbench" / "bench-cooperbench.png").exists() or cooperbench.plot(results, tmp_path) is None


def test_the_file_check_finds_a_misplaced_or_lost_block() -> None:
    base = [f"l{i}\n" for i in range(8)]
    a, b = Block(2, 2, ("A\n",)), Block(5, 6, ("B\n",))
    right = "".join([*base[:2], "A\n", *base[2:5], "B\n", *base[6:]])
    assert cooperbench.expected_matches(right, base, [a, b])
    misplaced = "".join([*base[:3], "A\n", *base[3:5], "B\n", *base[6:]])  # A one line down
    assert not cooperbench.expected_matches(misplaced, base, [a, b])
    lost = "".join([*base[:5], "B\n", *base[6:]])
    assert not cooperbench.expected_matches(lost, base, [a, b])
    # two insertions at one point: either order
    c = Block(2, 2, ("C\n",))
    assert cooperbench.expected_matches("".join([*base[:2], "C\n", "A\n", *base[2:]]), base, [a, c])
    assert cooperbench.expected_matches("".join([*base[:2], "A\n", "C\n", *base[2:]]), base, [a, c])


def test_a_patch_is_split_into_hunks_and_blocks() -> None:
    patch = (
        "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -2,4 +2,5 @@\n a\n-b\n+B\n c\n+new\n d\n"
        "diff --git a/g.py b/g.py\nnew file mode 100644\n--- /dev/null\n+++ b/g.py\n@@ -0,0 +1,1 @@\n+x\n"
    )
    f, g = parse_patch(patch)
    (h,) = f.hunks
    assert (h.path, h.start, h.old, h.new) == (
        "f.py",
        1,
        ("a\n", "b\n", "c\n", "d\n"),
        ("a\n", "B\n", "c\n", "new\n", "d\n"),
    )
    assert h.blocks == (Block(2, 3, ("B\n",)), Block(4, 4, ("new\n",)))
    assert g.created and g.hunks[0].new == ("x\n",)
    base = "".join(f"{x}\n" for x in "zabcdz")
    assert h.edit(base, shortest=True) == ("b\nc\n", "B\nc\nnew\n")  # no context line: "b\nc\n" is unique
    assert h.edit(base) == ("a\nb\nc\nd\n", "a\nB\nc\nnew\nd\n")
