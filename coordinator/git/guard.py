"""The git guard: refuse the git commands that would discard or sweep up other sessions' uncommitted work.

The rule is narrow on purpose (a guard that refuses everything makes agents useless): a command is refused
only when it is one of the sweeping or discarding forms below *and* the shared tree holds uncommitted changes
that are not the caller's (another session's writes, or a change made outside the coordinator). Read-only
commands, and commands touching only the caller's own changes, pass.

Sweeping or discarding forms: `stash` (but `stash list` / `stash show`), `reset --hard|--merge|--keep`,
`clean` (but `-n`), `checkout`/`restore` of paths others changed (or of `.`), a branch switch (`checkout
BRANCH`, `switch`), `add -A|--all|.|-u` or an `add` of others' paths, `commit -a|--all` or a `commit` naming
others' paths, and `rebase`, `merge`, `pull`, `cherry-pick`, `revert` over the dirty tree.
"""

from __future__ import annotations

import os
import re
import shlex

from coordinator.git.ledger import Ledger
from coordinator.git.plumbing import Git

_SEPARATORS = {"&&", "||", ";", "|", "&", "\n"}
_GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
_OVER_DIRTY_TREE = {"rebase", "merge", "pull", "cherry-pick", "revert", "am"}
_CONTINUE = {"--abort", "--continue", "--skip", "--quit"}


def git_invocations(command: str) -> list[list[str]]:
    """The argument lists (after `git` and its global options) of each git command in a shell line."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = command.split()
    found: list[list[str]] = []
    current: list[str] = []
    for word in [*words, ";"]:
        if word in _SEPARATORS or set(word) <= set(";&|"):
            if current:
                _collect(current, found)
            current = []
        else:
            current.append(word)
    return found


def _collect(words: list[str], found: list[list[str]]) -> None:
    while words and ("=" in words[0] and not words[0].startswith("-")):  # VAR=value prefixes
        words = words[1:]
    if not words or os.path.basename(words[0]) != "git":
        return
    args, i = words[1:], 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_WITH_VALUE else 1
    found.append(args[i:])


def _paths_of(args: list[str]) -> list[str]:
    if "--" in args:
        return args[args.index("--") + 1 :]
    return [a for a in args if not a.startswith("-")]


def _touches(paths: list[str], others: dict[str, list[str]], cwd_prefix: str) -> list[str]:
    hit = []
    for p in paths:
        norm = os.path.normpath(os.path.join(cwd_prefix, p)).replace(os.sep, "/")
        for other in others:
            if norm in (".", "") or other == norm or other.startswith(norm.rstrip("/") + "/"):
                hit.append(other)
    return sorted(set(hit))


def _short_all(arg: str) -> bool:
    """`-am`, `-av`: a cluster of short options with `-a` before any option that takes the rest as value."""
    if not arg.startswith("-") or arg.startswith("--"):
        return False
    cluster = re.split("[mFCcSu]", arg[1:], maxsplit=1)[0]
    return "a" in cluster


Others = dict[str, list[str]]


def _stash(rest: list[str], others: Others) -> list[str] | None:
    return None if rest[:1] in (["list"], ["show"]) else sorted(others)


def _reset(rest: list[str], others: Others) -> list[str] | None:
    return sorted(others) if {"--hard", "--merge", "--keep"} & set(rest) else None


def _clean(rest: list[str], others: Others) -> list[str] | None:
    return None if {"-n", "--dry-run"} & set(rest) else sorted(others)


def _restore(rest: list[str], others: Others) -> list[str] | None:
    return _touches(_paths_of(rest), others, "") or None


def _checkout(rest: list[str], others: Others) -> list[str] | None:
    if "--" in rest:
        return _restore(rest, others)
    if {"-b", "-B"} & set(rest):
        return None  # a new branch at HEAD keeps the tree
    targets = [a for a in rest if not a.startswith("-")]
    return (_touches(targets, others, "") or sorted(others)) if targets else None


def _switch(rest: list[str], others: Others) -> list[str] | None:
    return None if {"-c", "-C", "--create"} & set(rest) else sorted(others)


def _add(rest: list[str], others: Others) -> list[str] | None:
    if {"-A", "--all", "-u", "--update"} & set(rest):
        return sorted(others)
    return _touches(_paths_of(rest), others, "") or None


def _commit(rest: list[str], others: Others) -> list[str] | None:
    if {"-a", "--all"} & set(rest) or any(_short_all(a) for a in rest):
        return sorted(others)
    paths = rest[rest.index("--") + 1 :] if "--" in rest else []
    return _touches(paths, others, "") or None


def _over_dirty_tree(rest: list[str], others: Others) -> list[str] | None:
    return None if _CONTINUE & set(rest) else sorted(others)


_RULES = {
    "stash": _stash,
    "reset": _reset,
    "clean": _clean,
    "checkout": _checkout,
    "restore": _restore,
    "switch": _switch,
    "add": _add,
    "commit": _commit,
    **{sub: _over_dirty_tree for sub in _OVER_DIRTY_TREE},
}


def _sweeps(args: list[str], others: Others) -> list[str] | None:
    """The others' paths the command would sweep up or discard; None when it is safe."""
    rule = _RULES.get(args[0]) if args else None
    return rule(args[1:], others) if rule and others else None


def others_uncommitted(root: str, session_id: str) -> dict[str, list[str]]:
    """Paths with uncommitted changes that are not only `session_id`'s: path -> who made them."""
    git = Git(root)
    ledger = Ledger(root)
    found: dict[str, list[str]] = {}
    for gp in git.status_paths():
        key = os.path.relpath(os.path.join(git.toplevel, gp), ledger.root).replace(os.sep, "/")
        if key.startswith(".edit-coordinator/") or key.startswith("../"):
            continue
        writers = sorted({e.session for e in ledger.uncommitted(ledger.path_writes(key))})
        if not writers:
            writers = ["a change made outside the coordinator"]
        if writers != [session_id]:
            found[gp] = [w for w in writers if w != session_id]
    return found


def check_shell_command(command: str, root: str, session_id: str) -> str | None:
    """None when `command` may run; else a refusal for the model naming the safe equivalent."""
    invocations = git_invocations(command)
    if not invocations:
        return None
    others: dict[str, list[str]] | None = None
    for args in invocations:
        if not args or args[0] not in _RULES:
            continue  # read-only or harmless whatever the tree holds: no need to look
        if others is None:
            try:
                others = others_uncommitted(root, session_id)
            except Exception:
                return None  # not a git repository, or git missing: nothing of others' to protect
        hit = _sweeps(args, others)
        if hit:
            return _refusal(args, hit, others, session_id)
    return None


def _refusal(args: list[str], hit: list[str], others: dict[str, list[str]], session_id: str) -> str:
    shown = ", ".join(f"{p} ({', '.join(others[p])})" for p in hit[:8]) + (" ..." if len(hit) > 8 else "")
    return (
        f"Refused: `git {' '.join(args)}` would sweep up or discard uncommitted work of other sessions in this "
        f"shared checkout: {shown}. To commit only your own changes run "
        f"`edit-coordinator commit --session {session_id} -m MSG`; read-only git commands (status, diff, log, "
        "show) are fine. Leave the others' files as they are."
    )
