"""`commit`: a git commit on the current branch of exactly one session's acknowledged, uncommitted writes.

Invariants, each enforced here:
1. The working tree is never touched: the commit is built from HEAD's blobs and the history's contents in a
   private index (`GIT_INDEX_FILE`) and object writes; other sessions' uncommitted hunks stay in the tree.
2. The session's change is carried onto HEAD's text by the commutation rule of the rebase policy
   (`text.rebase.carry_change`), one write at a time; a write whose lines overlap another session's uncommitted
   change cannot be separated from it and is refused, naming that session and the lines, unless the caller
   asks for both (`include_others`: the file as the session wrote it).
3. The branch ref moves by compare-and-swap on the value the commit was built on; when it moved meanwhile the
   commit is rebuilt on the new HEAD (a few times), never overwriting anyone's commit.
4. The shared index afterwards: a committed path's entry follows the new commit only where it still equalled
   the old HEAD's (nobody had staged anything else); what anyone staged stays staged.
5. All or nothing (landing.py): the ref, the shared index and the session's marks move together under git's
   index lock and a journal; a failure rolls back by compare-and-swap, a kill is completed or dropped by the
   next commit. A write whose result HEAD already holds is not committed twice, which is also how a person's
   own `git commit` of them is recognised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.arguments import check_session_id, is_call_id
from coordinator.disk.layout import tmp_dir
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.check import refuse, run_check
from coordinator.git.landing import Landing, land, recover
from coordinator.git.ledger import Ledger, PathWrites, write_marks
from coordinator.git.plumbing import Git, TreeEntry, index_line
from coordinator.history import HistoryEntry
from coordinator.history.retention import settle
from coordinator.text.rebase import carry_change

SESSION_TRAILER = "Coordinator-Session"
TOOL_CALL_TRAILER = "Coordinator-Tool-Call"
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class CommitResult:
    session: str
    commit: str | None  # None: nothing new to commit (everything was already in HEAD)
    branch: str
    paths: tuple[str, ...]  # paths the commit changed, relative to the root
    recognised: tuple[str, ...] = ()  # paths whose writes HEAD already held (committed outside)
    attempts: int = 1
    versions: dict[str, int] = field(default_factory=dict)  # newest committed version per path
    recovered: tuple[str, ...] = ()  # interrupted landings completed or dropped first (landing.recover)
    checks: int = 0  # runs of the --check command (one per attempt)

    def to_dict(self) -> dict[str, object]:
        return {
            "session": self.session,
            "commit": self.commit,
            "branch": self.branch,
            "paths": list(self.paths),
            "recognised": list(self.recognised),
            "attempts": self.attempts,
            "versions": dict(self.versions),
            "recovered": list(self.recovered),
            "checks": self.checks,
        }


class Inseparable(CoordinatorError):
    """A session's write edits lines another session wrote and has not committed."""


def _as_text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _clashing_lines(clashing: object) -> str:
    """Where a change and HEAD's clash, from the carry's refusal details: "lines 3-4, 9 of HEAD's version"."""
    spans = [f"{a}" if a == b else f"{a}-{b}" for a, b in clashing] if isinstance(clashing, list) else []
    return f"lines {', '.join(spans)} of HEAD's version" if spans else "the same lines of HEAD's version"


def _carry(
    ledger: Ledger, key: str, entry: HistoryEntry, text: bytes | None, others: list[str], include_others: bool
) -> bytes | None:
    """HEAD's content of `key` (`text`, None: absent) with `entry`'s change applied."""
    before, after = ledger.load(key, entry.before), ledger.load(key, entry.after)
    if text == after or before == text:
        return after
    if include_others:
        return after
    bt, at, tt = (_as_text(b) if b is not None else None for b in (before, after, text))
    if bt is not None and at is not None and tt is not None:
        try:
            return carry_change(bt, at, tt, name=key, what=f"version {entry.version}").text.encode("utf-8")
        except CoordinatorError as exc:  # said in this refusal's own words: no refusal nested in another
            detail = _clashing_lines(exc.details.get("clashing"))
    else:
        detail = f"{key} was created, removed or is not UTF-8 text, and differs from HEAD's"
    who = ", ".join(others) or "an outside change (no session)"
    raise Inseparable(
        ErrorCode.STALE,
        f"Cannot commit session {entry.session}'s version {entry.version} of {key} alone: it changes lines "
        f"that {who} changed and did not commit ({detail}). Commit theirs first (edit-coordinator commit "
        f"--session {others[0] if others else 'S'} -m MSG), or commit both with --include-others.",
        path=key,
        version=entry.version,
        others=others,
        reason="inseparable",
    )


@dataclass
class _Plan:
    contents: dict[str, bytes | None]  # git path -> new content (None: removed)
    keys: dict[str, str]  # git path -> root key
    versions: dict[str, int]
    recognised: list[str]
    calls: list[str]  # the agent's tool-call ids of the writes committed (hooked writes), in order


def _plan(ledger: Ledger, git: Git, head: str | None, session_id: str, include_others: bool) -> _Plan:
    mine: list[tuple[PathWrites, list[HistoryEntry]]] = []
    for writes in ledger.all_paths():
        pending = [e for e in ledger.uncommitted(writes) if e.session == session_id]
        if pending:
            if settle(ledger.state_dir, writes.key, ledger.root):  # a write that never reached the file
                writes = ledger.path_writes(writes.key)
                pending = [e for e in ledger.uncommitted(writes) if e.session == session_id]
            mine.append((writes, pending))
    if not mine:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            f"Session {session_id} has no uncommitted writes: nothing to commit. "
            f"`edit-coordinator history --session {session_id}` lists what it wrote.",
        )
    gpaths = {w.key: _git_path(ledger.root, git.toplevel, w.key) for w, _ in mine}
    tree = git.tree_entries(head, list(gpaths.values()))
    blobs = git.cat_blobs([t.oid for t in tree.values()])
    plan = _Plan({}, {}, {}, [], [])
    for writes, pending in mine:
        gp = gpaths[writes.key]
        head_text = blobs[tree[gp].oid] if gp in tree else None
        others = sorted({e.session for e in ledger.uncommitted(writes) if e.session != session_id})
        text = head_text
        for entry in pending:
            text = _carry(ledger, writes.key, entry, text, others, include_others)
            if entry.call and entry.call not in plan.calls:
                plan.calls.append(entry.call)
        plan.versions[writes.key] = pending[-1].version
        if text == head_text:
            plan.recognised.append(writes.key)
        else:
            plan.contents[gp], plan.keys[gp] = text, writes.key
    return plan


def _git_path(root: str, toplevel: str, key: str) -> str:
    rel = os.path.relpath(os.path.join(root, key), os.path.realpath(toplevel))
    if rel.startswith(".."):
        raise CoordinatorError(ErrorCode.OUTSIDE_ROOT, f"{key} is outside the git work tree {toplevel}.")
    return rel.replace(os.sep, "/")


def _mode(root: str, toplevel: str, gp: str, old: TreeEntry | None) -> str:
    if old is not None:
        return old.mode
    try:
        return "100755" if os.stat(os.path.join(toplevel, gp)).st_mode & 0o111 else "100644"
    except OSError:
        return "100644"


def _message(message: str, session_id: str, calls: list[str] | None = None) -> str:
    """The message with its trailers: the session, and the agent's tool-call ids of the hooked writes
    committed (one `Coordinator-Tool-Call:` line each, where the history knows them)."""
    body = message.rstrip("\n")
    if not body.strip():
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The commit message is empty: pass -m MSG.")
    # A trailer's value is one line of the ids' rule, so no id can add a trailer of its own (`victim\nSigned-off-by:
    # x`); a call id recorded before the rule was enforced at the hooks is left out rather than written.
    check_session_id(session_id)
    safe_calls = [c for c in calls or () if is_call_id(c)]
    trailers = [f"{SESSION_TRAILER}: {session_id}", *(f"{TOOL_CALL_TRAILER}: {c}" for c in safe_calls)]
    return body + "\n\n" + "\n".join(trailers) + "\n"


def commit_session(
    root: str,
    session_id: str,
    message: str,
    *,
    include_others: bool = False,
    before_ref_update: object = None,
    check: str | None = None,
    check_timeout_s: float | None = None,
) -> CommitResult:
    """Commit session `session_id`'s uncommitted writes under `root` (see the module's invariants).

    `before_ref_update`, a callable taking the attempt number, runs just before the landing: tests use it to
    move the branch in between. `check`: a shell command run on the commit's tree in a scratch folder (check.py)
    before the branch moves; a failure refuses the commit (`check_failed`, the output's tail in the message);
    when the branch moved meanwhile the commit is rebuilt on it and checked again."""
    _message(message, session_id)  # an empty message is refused before anything else is done
    git = Git(root)
    ledger = Ledger(root)
    scratch = tmp_dir(ledger.state_dir)
    scratch.mkdir(parents=True, exist_ok=True)
    recovered = tuple(recover(git, Path(ledger.state_dir)))  # a landing a killed process left half-way
    checks = 0
    for attempt in range(1, MAX_ATTEMPTS + 1):
        ref, head = git.head()
        if ref is None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                "HEAD is detached: check out a branch (git switch BRANCH) before committing a session's work.",
            )
        plan = _plan(ledger, git, head, session_id, include_others)
        if not plan.contents:
            _finish(ledger, session_id, plan)
            return CommitResult(session_id, None, ref, (), tuple(plan.recognised), attempt, plan.versions, recovered)
        old = git.tree_entries(head, list(plan.contents))
        new_commit, info = _build(git, head, plan, old, _message(message, session_id, plan.calls), str(scratch))
        if check is not None:  # on every attempt: a commit rebuilt on a moved branch is checked again
            run = run_check(git, new_commit, check, check_timeout_s)
            checks += 1
            if not run.passed:
                raise refuse(run, session_id)
        hook = (lambda n=attempt: before_ref_update(n)) if callable(before_ref_update) else None
        landing = Landing(ref, head, new_commit, old, info, session_id, plan.versions)
        if land(git, Path(ledger.state_dir), landing, hook):
            paths = tuple(sorted(plan.keys.values()))
            return CommitResult(
                session_id, new_commit, ref, paths, tuple(plan.recognised), attempt, plan.versions, recovered, checks
            )
    raise CoordinatorError(
        ErrorCode.STALE,
        f"The branch moved during each of {MAX_ATTEMPTS} attempts to commit session {session_id}'s work; "
        "nothing was committed and nothing lost. Try again when the other commits are done.",
    )


def _build(
    git: Git, head: str | None, plan: _Plan, old: dict[str, TreeEntry], message: str, scratch: str
) -> tuple[str, dict[str, tuple[str, str]]]:
    present = [gp for gp, data in plan.contents.items() if data is not None]
    oids = git.write_blobs([plan.contents[gp] or b"" for gp in present], scratch)
    info: dict[str, tuple[str, str]] = {}  # git path -> (mode, oid); mode "0" removes
    for gp, oid in zip(present, oids, strict=True):
        info[gp] = (_mode(git.root, git.toplevel, gp, old.get(gp)), oid)
    for gp, data in plan.contents.items():
        if data is None:
            info[gp] = ("0", git.zero_oid)
    lines = "".join(index_line(m, o, gp) for gp, (m, o) in info.items())
    tree = git.write_tree(head, lines, scratch)
    return git.commit_tree(tree, head, message), info


def _finish(ledger: Ledger, session_id: str, plan: _Plan) -> None:
    marks = dict(ledger.marks(session_id))
    marks.update(plan.versions)
    write_marks(Path(ledger.state_dir), session_id, marks)
