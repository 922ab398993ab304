"""What a commit of N files costs: git's plumbing commands (coordinator/git/plumbing.py, what `commit` uses)
against the pygit2 library doing the same work in-process, side by side in one run.

    python3 scripts/git_commit_cost.py [--files 1,10,100] [--repeat 7] [--json]

Both sides do the same: N new blobs, a tree from HEAD's with the N entries replaced (in a private index),
a commit object and the branch ref moved from HEAD. The plumbing side also reports `commit_session` whole
(history read, carry onto HEAD, shared index follow-up). pygit2 is not a dependency: without it only the
plumbing side is measured. Prints median milliseconds per commit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from coordinator.git.plumbing import Git, index_line

TREE_FILES = 300


def _repo(base: Path) -> Path:
    root = base / "repo"
    (root / "src").mkdir(parents=True)
    for i in range(TREE_FILES):
        (root / "src" / f"m{i}.py").write_text("".join(f"line {j} of {i}\n" for j in range(200)))
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "base"], cwd=root, check=True)
    return root


def plumbing_commit(root: Path, n: int, round_: int) -> None:
    git = Git(str(root))
    ref, head = git.head()
    paths = [f"src/m{i}.py" for i in range(n)]
    oids = git.write_blobs([f"round {round_} of {p}\n".encode() for p in paths], str(root.parent))
    lines = "".join(index_line("100644", o, p) for p, o in zip(paths, oids, strict=True))
    tree = git.write_tree(head, lines, str(root.parent))
    commit = git.commit_tree(tree, head, f"round {round_}\n")
    assert ref and git.move_ref(ref, commit, head)


def pygit2_commit(root: Path, n: int, round_: int) -> None:
    import pygit2

    repo = pygit2.Repository(str(root))
    head = repo.head.target
    index = pygit2.Index()
    index.read_tree(repo[head].tree)
    for i in range(n):
        path = f"src/m{i}.py"
        oid = repo.create_blob(f"round {round_} of {path}\n".encode())
        index.add(pygit2.IndexEntry(path, oid, pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    sig = repo.default_signature
    # No compare-and-swap of the ref in pygit2's API: create_commit moves it unconditionally.
    repo.create_commit("refs/heads/main", sig, sig, f"round {round_}\n", tree, [head])


def _median_ms(fn: Callable[[Path, int, int], None], root: Path, n: int, repeat: int) -> float:
    times = []
    for r in range(repeat):
        start = time.perf_counter()
        fn(root, n, r)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(counts: list[int], repeat: int) -> dict[str, dict[int, float]]:
    os.environ.setdefault("GIT_AUTHOR_NAME", "bench")
    os.environ.setdefault("GIT_AUTHOR_EMAIL", "bench@example.com")
    os.environ.setdefault("GIT_COMMITTER_NAME", "bench")
    os.environ.setdefault("GIT_COMMITTER_EMAIL", "bench@example.com")
    sides: dict[str, Callable[[Path, int, int], None]] = {"plumbing": plumbing_commit}
    try:
        import pygit2  # noqa: F401

        sides["pygit2"] = pygit2_commit
    except ImportError:
        pass
    results: dict[str, dict[int, float]] = {name: {} for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        root = _repo(Path(tmp))
        for n in counts:
            for name, fn in sides.items():  # side by side, alternating per count
                results[name][n] = _median_ms(fn, root, n, repeat)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="1,10,100")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure([int(x) for x in args.files.split(",")], args.repeat)
    if args.json:
        print(json.dumps(results))
        return 0
    for name, row in results.items():
        print(f"{name:>9}: " + "  ".join(f"{n} files {ms:.1f} ms" for n, ms in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
