"""The landing of a built commit: the branch ref, the shared index and the ledger's marks move together, or
not at all.

The steps, in order (`EC_GIT_FAULT_STEP=N` makes the process kill itself with SIGKILL just after step N: the
fault tests use it):
1. write a journal (the ref, the old and new commits, the session's new marks, our pid and lock token);
2. take git's own lock on the shared index (`.git/index.lock`, created exclusively as git does, our token
   written in it), so that no git process changes the index between our reading and replacing it; when
   another process holds it, wait a little, then refuse with nothing moved;
3. write the new shared index into a file of our own beside it: a copy of the index with each committed
   path following the new commit where it still equalled the old HEAD's entry (what anyone staged stays);
4. move the ref by compare-and-swap: the commit point (an `update-ref` that fails with the ref unmoved, its
   lock held by another git process, waits a little, then refuses: it is not a moved branch);
5. write the session's marks; 6. put the new index in place (rename over `.git/index`); 7. release the lock;
   then remove the journal.

A failure before 4 (a full disk writing the journal, the lock's token or the new index) drops what was prepared:
nothing moved. A failure after 4 in this process moves the ref
back by compare-and-swap (only if nobody committed on top), with the marks as they were, and says "rolled
back"; if the ref cannot go back it says the commit landed and leaves the rest to `recover`. After a kill,
`recover` (run before every commit) reads the journal of a process that is gone: when the ref holds or
descends from the new commit it completes steps 5-7 ("completed"); otherwise it drops what was prepared
("dropped"). The lock is removed only when it holds our token: never another process's lock. The one gap: a
kill between creating the lock and writing the token into it (two system calls) leaves an empty
`.git/index.lock` that git reports until someone removes it, as after a git process killed at that point.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from coordinator.disk import fsio
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.ledger import LEDGER_DIR, read_marks, write_marks
from coordinator.git.plumbing import Git, TreeEntry, index_line

FAULT_ENV = "EC_GIT_FAULT_STEP"
LOCK_WAIT_S = 2.0


def _fault(step: int) -> None:
    if os.environ.get(FAULT_ENV) == str(step):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Journal:
    ref: str
    old: str | None
    new: str
    session: str
    marks: dict[str, int]
    previous_marks: dict[str, int]
    pid: int
    token: str
    index_tmp: str

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(asdict(self), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk leaves no half-written journal behind
            raise

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


_ACTIVE: set[str] = set()  # journals of landings running in this process (never recovered from under them)


def journal_dir(state_dir: str | Path) -> Path:
    return Path(state_dir) / LEDGER_DIR / "landing"


def _take_lock(lock: Path, token: str) -> None:
    """Create git's index lock exclusively, our token in it. Waits up to LOCK_WAIT_S for another holder."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if time.monotonic() >= deadline:
                raise CoordinatorError(
                    ErrorCode.LOCK_TIMEOUT,
                    f"{lock} exists: another git process is changing the index (or one crashed and left the "
                    "lock). Nothing was committed and the branch did not move. Retry when it is done; if no git "
                    "process is running, remove that file and retry.",
                ) from None
            time.sleep(0.05)
            continue
        try:
            os.write(fd, token.encode())
        except BaseException:
            lock.unlink(missing_ok=True)  # created by us a moment ago: no token in it, so _drop would leave it
            raise
        finally:
            os.close(fd)
        return


def _release_lock(lock: Path, token: str) -> None:
    with contextlib.suppress(OSError):
        if lock.read_bytes() == token.encode():
            lock.unlink()


def _prepare_index(
    git: Git, index: Path, tmp: Path, old: dict[str, TreeEntry], info: dict[str, tuple[str, str]]
) -> None:
    """The shared index with each committed path following the new commit where it still equalled the old
    HEAD's entry (what anyone staged stays staged), written to `tmp` beside it."""
    if not index.exists():
        return  # no index yet: git builds one when it needs it
    # With its modification time: git trusts an entry's stat data only when the file is older than the index
    # ("racy git"); a copy stamped now made a file changed in the index's own second look clean (`git status`
    # lost another session's uncommitted same-size edit, seen in the auto-commit test).
    shutil.copy2(index, tmp)
    staged = git.index_entries(list(info))
    lines = "".join(index_line(m, o, gp) for gp, (m, o) in info.items() if staged.get(gp) == old.get(gp))
    if lines:
        git.run(["update-index", "-z", "--index-info"], stdin=lines.encode(), env={"GIT_INDEX_FILE": str(tmp)})


@dataclass(frozen=True)
class Landing:
    """What one landing moves: the branch `ref` from `old` to `new`, the shared index entries (`old_entries`
    -> `info`), and `session`'s marks."""

    ref: str
    old: str | None
    new: str
    old_entries: dict[str, TreeEntry]
    info: dict[str, tuple[str, str]]
    session: str
    marks: dict[str, int]


def _paths(git: Git, state_dir: Path) -> tuple[Path, Path, Path]:
    journal = journal_dir(state_dir) / f"{os.getpid()}-{time.monotonic_ns()}.json"
    return Path(git.git_dir) / "index", Path(git.git_dir) / "index.lock", journal


def land(git: Git, state_dir: Path, landing: Landing, before_ref_update: Callable[[], None] | None = None) -> bool:
    """Land `landing` all or nothing. False when the ref moved meanwhile (nothing changed: build again)."""
    index, lock, journal_file = _paths(git, state_dir)
    previous = read_marks(state_dir, landing.session)
    marks = {**previous, **landing.marks}
    token = f"edit-coordinator {os.getpid()} {journal_file.stem}\n"
    tmp = index.with_name(f"index.ec-{journal_file.stem}")
    journal = Journal(
        landing.ref, landing.old, landing.new, landing.session, marks, previous, os.getpid(), token, str(tmp)
    )
    if before_ref_update is not None:  # tests move the branch here (before our lock: a commit of theirs takes it)
        before_ref_update()
    _ACTIVE.add(str(journal_file))
    try:
        try:
            journal.save(journal_file)
            _fault(1)
            _take_lock(lock, token)
            _fault(2)
            _prepare_index(git, index, tmp, landing.old_entries, landing.info)
            _fault(3)
            moved = _swap(git, landing.ref, landing.new, landing.old)
        except BaseException as exc:
            _drop(journal)
            journal_file.unlink(missing_ok=True)
            if isinstance(exc, OSError):  # a full disk before the commit point: nothing moved
                raise CoordinatorError(
                    ErrorCode.IO_ERROR,
                    f"The commit could not be prepared ({exc}): nothing was committed; the branch, the index and "
                    "the ledger are as they were. Fix the cause (free some disk space) and retry.",
                ) from exc
            raise
        if not moved:
            _drop(journal)
            journal_file.unlink(missing_ok=True)
            return False
        _fault(4)
        _after_ref(git, state_dir, journal, journal_file)
        return True
    finally:
        _ACTIVE.discard(str(journal_file))


def _swap(git: Git, ref: str, new: str, old: str | None) -> bool:
    """The compare-and-swap of the ref; False when the ref moved meanwhile (build again). When `update-ref`
    fails with the ref still at `old` (its lock `REF.lock` held by another git process, a full disk), it waits
    up to LOCK_WAIT_S, then refuses with git's reason and nothing moved: that failure is not a moved branch."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        failed = git.move_ref_failure(ref, new, old)
        if failed is None:
            return True
        if git.ref_oid(ref) != old:
            return False
        if time.monotonic() >= deadline:
            raise CoordinatorError(
                ErrorCode.LOCK_TIMEOUT if ".lock" in failed else ErrorCode.IO_ERROR,
                f"git could not move {ref} ({failed}). Nothing was committed and the branch did not move. Retry "
                "when the other git process is done; if none is running, remove the lock file it names.",
            )
        time.sleep(0.05)


def _drop(journal: Journal) -> None:
    Path(journal.index_tmp).unlink(missing_ok=True)
    _release_lock(Path(journal.index_tmp).with_name("index.lock"), journal.token)


def _after_ref(git: Git, state_dir: Path, journal: Journal, journal_file: Path) -> None:
    """Steps 5-7 after the commit point; on a failure, the ref goes back by compare-and-swap if it can."""
    try:
        _complete(state_dir, journal, journal_file)
    except OSError as exc:
        back = git.move_ref(journal.ref, journal.old, journal.new) if journal.old else False
        if back:
            with contextlib.suppress(OSError):
                write_marks(state_dir, journal.session, journal.previous_marks)
            _drop(journal)
            journal_file.unlink(missing_ok=True)
            raise CoordinatorError(
                ErrorCode.IO_ERROR,
                f"The commit could not be completed ({exc}): rolled back, the branch is at {journal.old} again "
                "and the index and the ledger are as they were. Nothing was committed; fix the cause and retry.",
            ) from exc
        raise CoordinatorError(
            ErrorCode.IO_ERROR,
            f"Commit {journal.new} landed on {journal.ref} but its follow-up failed ({exc}) and the branch could not "
            "be moved back (it moved on): the next commit completes the index and the ledger.",
        ) from exc


def _complete(state_dir: Path, journal: Journal, journal_file: Path) -> None:
    write_marks(state_dir, journal.session, journal.marks)
    _fault(5)
    tmp = Path(journal.index_tmp)
    if tmp.exists():
        os.replace(tmp, tmp.with_name("index"))
    _fault(6)
    _release_lock(tmp.with_name("index.lock"), journal.token)
    _fault(7)
    journal_file.unlink(missing_ok=True)


def recover(git: Git, state_dir: Path) -> list[str]:
    """Finish or drop the landings of processes that died mid-way (or failed in this one); what was done."""
    done: list[str] = []
    folder = journal_dir(state_dir)
    if not folder.is_dir():
        return done
    for path in sorted(folder.glob("*.json")):
        journal = Journal.load(path)
        if str(path) in _ACTIVE or journal is None or (journal.pid != os.getpid() and fsio.pid_alive(journal.pid)):
            continue
        try:
            if _landed(git, journal):
                _complete(state_dir, journal, path)
                done.append(f"completed the interrupted commit {journal.new} of session {journal.session}")
            else:
                _drop(journal)
                path.unlink(missing_ok=True)
                done.append(f"dropped the interrupted commit {journal.new} of session {journal.session} (never landed)")
        except OSError:
            continue  # another process is recovering it, or the disk still fails: the next commit tries again
    return done


def _landed(git: Git, journal: Journal) -> bool:
    now = git.ref_oid(journal.ref)
    if not now:
        return False
    if now == journal.new:
        return True
    return git.run(["merge-base", "--is-ancestor", journal.new, now], check=False).returncode == 0
