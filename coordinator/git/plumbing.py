"""Git's plumbing commands, run as subprocesses: the one place that spawns `git`.

Why plumbing and not a library (pygit2): a commit costs a fixed handful of git processes whatever the number of
files (objects for all files in one `hash-object --stdin-paths`, the tree from a private index filled by one
`update-index --index-info`), git's own code handles every repository format and config (sha256 objects,
split indexes, alternates), and no compiled dependency is added. The figures are in BENCHMARKS.md,
"Git commits: plumbing and pygit2, measured".
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.errors import CoordinatorError, ErrorCode

ZERO_OID_LEN = {"sha1": 40, "sha256": 64}


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    oid: str


class Git:
    """Plumbing calls on the repository whose work tree is `root`."""

    def __init__(self, root: str) -> None:
        self.root = root
        out = self.run(["rev-parse", "--show-toplevel", "--git-dir"], check=False)
        if out.returncode != 0:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"{root} is not inside a git repository: run `git init` there, or pass --root of a git checkout.",
            )
        top, git_dir = out.stdout.decode().splitlines()[:2]
        self.toplevel = top
        self.git_dir = str(Path(root, git_dir).resolve()) if not os.path.isabs(git_dir) else git_dir
        fmt = self.run(["rev-parse", "--show-object-format"], check=False).stdout.decode().strip() or "sha1"
        self.zero_oid = "0" * ZERO_OID_LEN.get(fmt, 40)

    def run(
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        # Every path given to git is a file name, never pathspec magic: `:colon.py`, `:(top)x.py`, `:!x.py` and
        # `*.py` name those files (GIT_LITERAL_PATHSPECS, the environment form of --literal-pathspecs).
        full_env = {**os.environ, "GIT_LITERAL_PATHSPECS": "1", **(env or {})}
        proc = subprocess.run(
            ["git", *args], cwd=self.root, input=stdin, capture_output=True, env=full_env, check=False
        )
        if check and proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip()
            raise CoordinatorError(ErrorCode.IO_ERROR, f"git {args[0]} failed: {msg}")
        return proc

    def head(self) -> tuple[str | None, str | None]:
        """(the branch ref HEAD points to, or None when detached; the commit id, or None on an unborn branch)."""
        ref = self.run(["symbolic-ref", "-q", "HEAD"], check=False).stdout.decode().strip() or None
        oid = self.run(["rev-parse", "-q", "--verify", "HEAD^{commit}"], check=False).stdout.decode().strip()
        return ref, oid or None

    def tree_entries(self, commit: str | None, paths: Sequence[str]) -> dict[str, TreeEntry]:
        """Mode and blob id of each of `paths` in `commit` (paths absent there are left out)."""
        if commit is None or not paths:
            return {}
        out = self.run(["ls-tree", "-z", "--full-tree", commit, "--", *paths]).stdout
        found: dict[str, TreeEntry] = {}
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            mode, kind, oid = meta.decode().split()
            if kind == "blob":
                found[os.fsdecode(path)] = TreeEntry(mode, oid)
        return found

    def cat_blobs(self, oids: Sequence[str]) -> dict[str, bytes]:
        """The contents of blobs, read in one `cat-file --batch`."""
        if not oids:
            return {}
        out = self.run(["cat-file", "--batch"], stdin="".join(f"{o}\n" for o in oids).encode()).stdout
        blobs: dict[str, bytes] = {}
        pos = 0
        for oid in oids:
            nl = out.index(b"\n", pos)
            header = out[pos:nl].decode().split()
            size = int(header[2])
            blobs[oid] = out[nl + 1 : nl + 1 + size]
            pos = nl + 1 + size + 1
        return blobs

    def write_blobs(self, contents: Sequence[bytes], scratch: str) -> list[str]:
        """Store each content as a blob (one `hash-object -w --stdin-paths --no-filters`); their ids in order.
        The bytes are stored as given: the history holds what is in the work tree, so no clean filter runs."""
        if not contents:
            return []
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            names = []
            for i, data in enumerate(contents):
                name = os.path.join(tmp, str(i))
                Path(name).write_bytes(data)
                names.append(name)
            out = self.run(["hash-object", "-w", "--no-filters", "--stdin-paths"], stdin="\n".join(names).encode())
        return out.stdout.decode().split()

    def write_tree(self, base: str | None, index_info: str, scratch: str) -> str:
        """The tree of `base` with the `update-index --index-info` lines applied, built in a private index."""
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.run(["read-tree", base] if base else ["read-tree", "--empty"], env=env)
            self.run(["update-index", "-z", "--index-info"], stdin=index_info.encode(), env=env)
            return self.run(["write-tree"], env=env).stdout.decode().strip()

    def check_out(self, commit: str, folder: str) -> None:
        """Write the files of `commit` into the empty `folder`, as a checkout of it would: `read-tree` into a
        private index, then `checkout-index --prefix`. Not `git archive`, which leaves out the paths marked
        `export-ignore` in .gitattributes (tests are often marked so) and rewrites `export-subst` files."""
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self.run(["read-tree", commit], env=env)
            self.run(["checkout-index", "-a", "-f", f"--prefix={os.path.join(folder, '')}"], env=env)

    def commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        """A commit object; author and committer from git's config and GIT_AUTHOR_* / GIT_COMMITTER_*. No hook
        runs: commit-tree is plumbing (docs/git.md says why that is the choice)."""
        args = ["commit-tree", tree] + (["-p", parent] if parent else [])
        return self.run(args, stdin=message.encode()).stdout.decode().strip()

    def move_ref(self, ref: str, new: str, old: str | None) -> bool:
        """Compare-and-swap: `ref` becomes `new` only if it still is `old` (None: only if it does not exist).
        False when it did not move (it moved meanwhile, or git could not lock it); nothing is overwritten."""
        return self.move_ref_failure(ref, new, old) is None

    def move_ref_failure(self, ref: str, new: str, old: str | None) -> str | None:
        """`move_ref`, with git's reason when the ref did not move (None: it moved)."""
        proc = self.run(["update-ref", ref, new, old or self.zero_oid], check=False)
        return None if proc.returncode == 0 else proc.stderr.decode(errors="replace").strip() or "update-ref failed"

    def ref_oid(self, ref: str) -> str | None:
        """The commit `ref` points to; None when it does not exist."""
        out = self.run(["rev-parse", "-q", "--verify", f"{ref}^{{commit}}"], check=False).stdout.decode().strip()
        return out or None

    def index_entries(self, paths: Sequence[str]) -> dict[str, TreeEntry]:
        """Stage-0 entries of the shared index for `paths`."""
        if not paths:
            return {}
        out = self.run(["ls-files", "-z", "--stage", "--", *paths]).stdout
        found: dict[str, TreeEntry] = {}
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            mode, oid, stage = meta.decode().split()
            if stage == "0":
                found[os.fsdecode(path)] = TreeEntry(mode, oid)
        return found

    def update_shared_index(self, index_info: str) -> None:
        if index_info:
            self.run(["update-index", "-z", "--index-info"], stdin=index_info.encode())

    def status_paths(self) -> list[str]:
        """Paths with uncommitted changes (staged, unstaged or untracked), relative to the top level."""
        out = self.run(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"]).stdout
        return [os.fsdecode(rec[3:]) for rec in out.split(b"\0") if len(rec) > 3]


def index_line(mode: str, oid: str, path: str) -> str:
    """One `update-index -z --index-info` record; mode "0" with the zero id removes the path."""
    return f"{mode} {oid}\t{path}\0"
