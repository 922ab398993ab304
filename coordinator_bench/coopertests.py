"""The features' own tests on a fully landed pair of the `cooperbench` scenario, where they run offline.

For a pair whose every hunk landed, the files as the replay left them are put into the repository's tree at
the base commit (``git archive``), and each feature's tests (its ``tests.patch``, applied to that tree
alone) are run with this interpreter: ``python -m pytest`` on the test files the task's ``run_tests.sh``
names, the tree's ``src`` and root first on the path, no plugin autoloading. A task's tests are first run
on the base tree itself; a task where they do not pass there (a dependency missing offline, a compiled
part) is reported as not runnable here, and its pairs are not counted either way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from coordinator_bench.cooperdata import BaseFiles, Feature, Task, parse_patch, splice, split_lines

_PYTEST = re.compile(r"-m pytest ((?:tests/\S+\.py\s*)+)")
TIMEOUT_S = 300


class TestRunner:
    """Runs the features' tests of fully landed pairs; one scratch tree per task, made once."""

    def __init__(self, dataset: Path, files: BaseFiles) -> None:
        self.dataset = dataset
        self.files = files
        self.scratch = Path(tempfile.mkdtemp(prefix="ec-coopertests-"))
        self._trees: dict[str, Path | None] = {}

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def test_files(self, task: Task) -> list[str]:
        script = self.dataset / task.key / "run_tests.sh"
        m = _PYTEST.search(script.read_text(errors="replace")) if script.exists() else None
        return m.group(1).split() if m else []

    def tree(self, task: Task) -> Path | None:
        """The base tree of the task, when its tests pass on it here; None otherwise."""
        if task.key not in self._trees:
            self._trees[task.key] = self._make_tree(task)
        return self._trees[task.key]

    def _make_tree(self, task: Task) -> Path | None:
        src = self.files.source(task)
        tests = self.test_files(task)
        if src is None or not tests or not Path(src, "objects").is_dir():  # a git dir, not a plain tree
            return None
        tree = self.scratch / task.key.replace("/", "_")
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "--git-dir", src, "archive", task.base_commit], capture_output=True, check=False
        )
        if archive.returncode != 0:
            return None
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        return tree if self._pytest(tree, tests) else None

    def both_pass(self, task: Task, a: Feature, b: Feature, final: dict[str, str]) -> bool | None:
        """Do both features' tests pass on the pair's files? None where the task's tests do not run here."""
        tree = self.tree(task)
        if tree is None:
            return None
        return all(self._feature_passes(task, tree, feat, final) for feat in (a, b))

    def _feature_passes(self, task: Task, tree: Path, feat: Feature, final: dict[str, str]) -> bool:
        work = self.scratch / "pair"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(tree, work, symlinks=True)
        try:
            for path, text in final.items():
                p = work / path
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(text.encode("utf-8", "surrogateescape"))
            patch = self.dataset / task.key / f"feature{feat.number}" / "tests.patch"
            if patch.exists() and not _apply(work, patch.read_text(errors="surrogateescape")):
                return False
            return self._pytest(work, self.test_files(task))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _pytest(self, tree: Path, tests: list[str]) -> bool:
        env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                cwd=tree,
                env=env,
                capture_output=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0


def _apply(tree: Path, patch_text: str) -> bool:
    """A tests patch applied to the tree's files (which it must fit at its place); False when it does not."""
    from coordinator_bench.cooperdata import located

    for fp in parse_patch(patch_text):
        target = tree / fp.path
        if fp.deleted:
            target.unlink(missing_ok=True)
            continue
        if fp.created:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(line for h in fp.hunks for line in h.new))
            continue
        if not target.exists():
            return False
        text = target.read_text(errors="surrogateescape")
        lines = split_lines(text)
        hunks = [located(h, lines, text) for h in fp.hunks]
        if any(h is None for h in hunks):
            return False
        blocks = [bl for h in hunks if h is not None for bl in h.blocks]
        target.write_text(splice(lines, blocks), errors="surrogateescape")
    return True
