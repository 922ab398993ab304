"""A checked landing: run a command on a commit's tree, in a scratch folder outside the working tree, before
the branch moves (`commit --check CMD`).

The tree is written out as a checkout of the commit into a fresh temporary folder (a private index and
`checkout-index`; nothing of the shared tree, index or branch is read or touched: the folder holds exactly what
the commit holds, every file of it, so the other sessions' uncommitted work is absent); CMD runs there with
`bash -c`, its output kept. A pass is exit 0. The folder is removed afterwards, whatever happened.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.plumbing import Git

TAIL_LINES = 40
TAIL_CHARS = 4000


@dataclass(frozen=True)
class CheckRun:
    command: str
    exit_status: int
    seconds: float
    output: str

    @property
    def passed(self) -> bool:
        return self.exit_status == 0

    def tail(self) -> str:
        lines = self.output.rstrip("\n").splitlines()[-TAIL_LINES:]
        return "\n".join(lines)[-TAIL_CHARS:]


def materialise(git: Git, commit: str, folder: str) -> None:
    """Write the tree of `commit` into `folder`, every file of it (Git.check_out)."""
    git.check_out(commit, folder)


def run_check(git: Git, commit: str, command: str, timeout_s: float | None = None) -> CheckRun:
    """Run `command` on `commit`'s tree; the run (a timeout counts as a failure, exit status 124)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # the check sees no repository
    with tempfile.TemporaryDirectory(prefix="ec-check-") as folder:
        materialise(git, commit, folder)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
            status, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            status, out = 124, (exc.output or b"") + f"\n(timed out after {timeout_s} s)\n".encode()
        return CheckRun(command, status, time.perf_counter() - start, out.decode(errors="replace"))


def refuse(run: CheckRun, session_id: str) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.CHECK_FAILED,
        f"The check `{run.command}` failed on the tree of session {session_id}'s commit (exit {run.exit_status}, "
        f"{run.seconds:.1f} s): nothing was committed; the branch, the index and the working tree are as they "
        f"were. The end of its output:\n{run.tail()}",
        exit_status=run.exit_status,
    )
