"""What a checked landing (`commit --check CMD`) costs on this repository, beside running CMD in the tree.

    python3 scripts/check_cost.py [--repeat 3] [--command "python3 -m pytest -q -p no:randomly tests/coordinator/text"]

For HEAD of the repository this script sits in: the time to write the commit's tree into a scratch folder
(a checkout by `read-tree` + `checkout-index`, check.materialise), CMD run there by `run_check` (what `--check`
does: a fresh folder every time, so no __pycache__), and CMD run in the working tree itself, interleaved,
medians of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from coordinator.git.check import materialise, run_check
from coordinator.git.plumbing import Git

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--command", default="python3 -m pytest -q -p no:randomly -x tests/coordinator/text")
    args = ap.parse_args()
    git = Git(str(ROOT))
    head = git.head()[1]
    assert head is not None
    write, checked, direct = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="ec-cost-") as folder:
            start = time.perf_counter()
            materialise(git, head, folder)
            write.append(time.perf_counter() - start)
        run = run_check(git, head, args.command)
        assert run.passed, run.tail()
        checked.append(run.seconds)
        start = time.perf_counter()
        subprocess.run(["bash", "-c", args.command], cwd=ROOT, capture_output=True, check=True)
        direct.append(time.perf_counter() - start)
    files = len(git.run(["ls-tree", "-r", "--name-only", head]).stdout.splitlines())
    print(f"HEAD {head[:7]}: {files} files; command: {args.command}")
    print(f"write the tree (read-tree + checkout-index): {statistics.median(write):.2f} s")
    print(f"command in the scratch folder (--check): {statistics.median(checked):.2f} s")
    print(f"command in the working tree:            {statistics.median(direct):.2f} s")


if __name__ == "__main__":
    main()
