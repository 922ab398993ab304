"""The git guard: refuse the git commands that would discard or sweep up other sessions' uncommitted work.

The rule is narrow on purpose (a guard that refuses everything makes agents useless): a command is refused
only when it is one of the sweeping or discarding forms below *and* the shared tree holds uncommitted changes
that are not the caller's (another session's writes, or a change made outside the coordinator). Read-only
commands, and commands touching only the caller's own changes, pass.

The line is read by the one shell parser (coordinator.text.shell: every simple command, through lists,
pipelines, subshells, groups, conditionals, substitutions, `bash -lc` strings and wrappers such as `env`,
`sudo`, `xargs`) and each git invocation by git's own grammar (gitargs.py: global options, `-c alias.x=...`,
clustered short options, pathspecs with or without `--`, pathspec magic such as `:/`, globs).

Sweeping or discarding forms: `stash` (but `stash list` / `stash show`), `reset --hard|--merge|--keep`,
`clean` (but `-n`), `checkout`/`restore` of paths others changed (or of `.`, `:/`, a glob), `checkout -f`, a
branch switch (`checkout BRANCH`, `switch`), `add -A|--all|-u|.|*|:/` or an `add` of others' paths, `commit
-a|--all` or a `commit` naming others' paths (with or without `--`), `rm`/`mv` of others' files (`mv -f`
onto one), `checkout-index -f`, `read-tree --reset -u`, and `rebase`,
`merge`, `pull`, `cherry-pick`, `revert`, `am` over the dirty tree. What cannot be judged (an alias from the
user's git config that cannot be read, a script file, `eval`, a variable command name, paths held in
variables) is named in the answer's `doubts`.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.git.gitargs import BUILTINS, GitCall, git_calls, line_doubts
from coordinator.git.ledger import Ledger
from coordinator.git.plumbing import Git
from coordinator.text.shell import Word

_OVER_DIRTY_TREE = {"rebase", "merge", "pull", "cherry-pick", "revert", "am"}
_CONTINUE = {"--abort", "--continue", "--skip", "--quit"}
_MAGIC = re.compile(r"^:(?:\((?P<long>[^)]*)\)|(?P<short>[/!^]*):?)(?P<rest>.*)$", re.DOTALL)
Others = dict[str, list[str]]
ALL = "\0all"  # a target standing for every path


def git_invocations(command: str) -> list[list[str]]:
    """The argument lists (after `git` and its global options, aliases given by `-c` expanded) of each git
    command in a shell line."""
    return [[c.sub, *c.args] for c in git_calls(command)]


@dataclass(frozen=True)
class _Where:
    top: str  # the git top level, a real absolute path
    base: str  # the folder the line starts in, a real absolute path


def _relative(path: str, top: str) -> str | None:
    """`path` (absolute, normalised) relative to `top` ("." for the top itself); None when outside it. A path
    spelled through a symbolic link (`cd /link/to/repo`) is compared by the real path of its folder."""
    for candidate in (path, posixpath.join(os.path.realpath(posixpath.dirname(path)), posixpath.basename(path))):
        if candidate == top:
            return "."
        if candidate.startswith(top.rstrip("/") + "/"):
            return candidate[len(top.rstrip("/")) + 1 :]
    return None


def _target(spec: Word, call: GitCall, where: _Where) -> tuple[str, bool] | None:
    """(path or glob relative to the top level, is a glob) of one pathspec; None when not known."""
    if spec.expands:
        return None
    text, top, exclude = spec.text, False, False
    magic = _MAGIC.match(text) if text.startswith(":") else None
    if magic:
        words = (magic.group("long") or "").split(",") if magic.group("long") is not None else []
        short = magic.group("short") or ""
        top = "/" in short or "top" in words
        exclude = bool({"!", "^"} & set(short)) or "exclude" in words
        text = magic.group("rest")
        if exclude or any(w.startswith("attr") for w in words):
            return ALL, False  # "everything but ...": as wide as the whole tree
    # Absolute folders and paths (`cd /repo/sub && ...`, `git -C /repo ...`, `git add /repo/a.py`: the form
    # agents use most) are taken relative to the top level, as git takes them.
    folder = where.top if top else posixpath.join(where.base, call.cwd or ".")
    relative = _relative(posixpath.normpath(posixpath.join(folder, text)), where.top)
    if relative is None:
        return text, False  # outside the work tree: git refuses it, and it names none of the others' paths
    if relative == ".":
        return ALL, False
    path = relative
    literal = magic is not None and "literal" in (magic.group("long") or "")
    return path, (spec.glob or bool(_GLOB.search(text))) and not literal


def _touches(call: GitCall, specs: tuple[Word, ...], others: Others, where: _Where, doubts: list[str]) -> list[str]:
    hit: set[str] = set()
    if call.cwd is None and specs:
        doubts.append(f"`git {call.sub}` runs in a folder not known before it runs (a `cd` or `-C` to a variable)")
    for spec in specs:
        target = _target(spec, call, where)
        if target is None:
            doubts.append(f"`git {call.sub} ... {spec.raw}`: the paths are not known before it runs")
            continue
        path, glob = target
        for alt in _alternatives(path) if glob else [path]:
            wild = glob and bool(_GLOB.search(alt))
            for other in others:
                if alt == ALL or other == alt or other.startswith(alt + "/") or (wild and fnmatch.fnmatch(other, alt)):
                    hit.add(other)
    return sorted(hit)


_GLOB = re.compile(r"[*?\[]")  # a pathspec character git matches as a glob
_BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")
MAX_ALTERNATIVES = 256


def _alternatives(pattern: str) -> list[str]:
    """The words the shell's brace expansion makes of `pattern` (`a.{py,txt}` -> a.py, a.txt), innermost braces
    first; more than MAX_ALTERNATIVES stand for every path."""
    found, todo = [], [pattern]
    while todo:
        word = todo.pop()
        match = _BRACES.search(word)
        if match is None:
            found.append(word)
        else:
            todo.extend(word[: match.start()] + part + word[match.end() :] for part in match.group(1).split(","))
        if len(found) + len(todo) > MAX_ALTERNATIVES:
            return [ALL]
    return found


_Touch = Callable[[tuple[Word, ...]], list[str]]


def _stash(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    first = call.pathspecs[0].text if call.pathspecs else ""
    if first in ("list", "show"):
        return None
    return touches(call.pathspecs[1:]) if first == "push" and call.pathspecs[1:] else everything


def _clean(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    return None if call.has("-n", "--dry-run") else (touches(call.pathspecs) if call.pathspecs else everything)


def _restore(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    only_index = call.has("--staged", "-S") and not call.has("--worktree", "-W")
    return None if only_index else touches(call.pathspecs)


def _switch(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    force = call.has("-f", "--force", "--discard-changes")
    return None if call.has("-c", "--create", "-C", "--force-create") and not force else everything


def _add(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    if call.has("-A", "--all", "-u", "--update", "--no-ignore-removal") and not call.pathspecs:
        return everything
    return touches(call.pathspecs)


def _checkout_index(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    if not call.has("-f", "--force"):
        return None
    return everything if call.has("-a", "--all") else touches(call.pathspecs)


_RULES: dict[str, Callable[[GitCall, list[str], _Touch], list[str] | None]] = {
    "stash": _stash,
    "reset": lambda c, everything, t: everything if c.has("--hard", "--merge", "--keep") else None,
    "clean": _clean,
    "restore": _restore,
    "switch": _switch,
    "add": _add,
    "commit": lambda c, everything, t: everything if c.has("-a", "--all") else t(c.pathspecs),
    "rm": lambda c, everything, t: t(c.pathspecs),
    "mv": lambda c, everything, t: t(c.pathspecs if c.has("-f", "--force") else c.pathspecs[:-1]),  # -f: over it
    # Plumbing that writes the work tree: `checkout-index -f` overwrites its paths (-a: all), `read-tree
    # --reset -u` every path; without -f, or -u without --reset, git leaves a changed file alone.
    "checkout-index": _checkout_index,
    "read-tree": lambda c, everything, t: everything if c.has("--reset") and c.has("-u") else None,
    **{sub: (lambda c, everything, t: None if _CONTINUE & set(c.options) else everything) for sub in _OVER_DIRTY_TREE},
}


def _rule(call: GitCall, others: Others, where: _Where, doubts: list[str]) -> list[str] | None:
    """The others' paths the call would sweep up or discard; None (or empty) when it is safe."""

    def touches(specs: tuple[Word, ...]) -> list[str]:
        if call.input_paths:  # the paths come from the input at run time: any of the others' may be among them
            return sorted(others)
        return _touches(call, specs, others, where, doubts)

    if call.sub == "checkout":
        return _checkout(call, sorted(others), touches)
    rule = _RULES.get(call.sub)
    return rule(call, sorted(others), touches) if rule else None


def _checkout(call: GitCall, everything: list[str], touches: _Touch) -> list[str] | None:
    force = call.has("-f", "--force")
    if call.has("-b", "-B", "--orphan"):
        return everything if force else None
    if "--" in call.args:
        after = len(call.args) - call.args.index("--") - 1
        return touches(call.pathspecs[len(call.pathspecs) - after :]) or (everything if force else None)
    if not call.pathspecs:
        return everything if force else None
    hit = touches(call.pathspecs)
    return hit or (everything if len(call.pathspecs) == 1 else None)  # `checkout BRANCH`: a switch


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


@dataclass(frozen=True)
class GuardAnswer:
    """The guard's judgement of a shell line: `refusal` (None: it may run) and `doubts`, what in the line the
    guard could not judge (named only when the tree holds others' uncommitted work)."""

    refusal: str | None
    doubts: tuple[str, ...] = ()

    def message(self) -> str | None:
        """The refusal for the model, with what the guard could not judge; None when the line may run."""
        if self.refusal is None:
            return None
        return self.refusal + (f" Not judged: {'; '.join(self.doubts)}." if self.doubts else "")

    def note(self) -> str:
        """For a line that may run: what in it the guard could not judge, said to the model ("" when nothing)."""
        if self.refusal is not None or not self.doubts:
            return ""
        return (
            f"The git guard let this command run without judging: {'; '.join(self.doubts)}. Other sessions have "
            "uncommitted work in this checkout: no git command in it may stash, reset, check out, clean or add "
            f"their files (commit your own work with `{shlex.join(cli_argv())} commit`)."
        )


def _config_aliases(root: str, calls: list[GitCall]) -> dict[str, str]:
    """The repository's git aliases for the unknown subcommands of `calls` (`git config --get alias.X`)."""
    found: dict[str, str] = {}
    unknown = {c.sub for c in calls if c.sub not in BUILTINS and c.alias is None}
    if not unknown:
        return found
    git = Git(root)
    for name in sorted(unknown):
        out = git.run(["config", "--get", f"alias.{name}"], check=False)
        if out.returncode == 0:
            found[name] = out.stdout.decode(errors="replace").strip()
    return found


def judge_shell_command(command: str, root: str, session_id: str, cwd: str | None = None) -> GuardAnswer:
    """Judge the shell line `command` run by `session_id` in `cwd` (default: the root). An empty `session_id`
    (a person's shell, a script with no session) owns nothing: every uncommitted change is another's."""
    try:
        calls = git_calls(command)
        aliases = _config_aliases(root, calls)
        if aliases:
            calls = git_calls(command, aliases)
    except Exception:
        return GuardAnswer(None)  # not a git repository, or git missing: nothing of others' to protect
    doubts = line_doubts(command) + [d for c in calls for d in c.doubts]
    sweeping = [c for c in calls if c.sub in _RULES or c.sub == "checkout"]
    if not sweeping and not doubts:
        return GuardAnswer(None)
    try:
        others = others_uncommitted(root, session_id)
        where = _where(root, cwd)
    except Exception:
        return GuardAnswer(None)
    if not others:
        return GuardAnswer(None)
    for call in sweeping:
        hit = _rule(call, others, where, doubts)
        if hit:
            return GuardAnswer(_refusal(call, hit, others, session_id), tuple(dict.fromkeys(doubts)))
    return GuardAnswer(None, tuple(dict.fromkeys(doubts)))


def _where(root: str, cwd: str | None) -> _Where:
    return _Where(os.path.realpath(Git(root).toplevel), os.path.realpath(cwd or root))


def check_shell_command(command: str, root: str, session_id: str, cwd: str | None = None) -> str | None:
    """None when `command`, run in `cwd` (default: the root), may run; else a refusal for the model naming the
    safe equivalent (and what in the line the guard could not judge). `judge_shell_command` gives the doubts of
    a line it lets through too."""
    return judge_shell_command(command, root, session_id, cwd).message()


def cli_argv() -> tuple[str, ...]:
    """This installation's command line by absolute path: the console script beside the interpreter, else the
    interpreter with -m. The one `init` writes into the hooks and the guard names in its advice: in an agent's
    shell a bare `edit-coordinator` may be another installation, or none."""
    import sys

    script = os.path.join(os.path.dirname(sys.executable), "edit-coordinator")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return (script,)
    return (sys.executable, "-m", "coordinator.cli")


def _refusal(call: GitCall, hit: list[str], others: Others, session_id: str) -> str:
    shown = ", ".join(f"{p} ({', '.join(others[p])})" for p in hit[:8]) + (" ..." if len(hit) > 8 else "")
    alias = f" (the alias {call.alias})" if call.alias else ""
    session = shlex.quote(session_id) if session_id else "S"  # no session: the one whose work it is
    return (
        f"Refused: `git {' '.join([call.sub, *call.args])}`{alias} would sweep up or discard uncommitted work of "
        f"other sessions in this shared checkout: {shown}. To commit only your own changes run "
        f"`{shlex.join(cli_argv())} commit --session {session} -m MSG`; read-only git commands "
        "(status, diff, log, show) are fine. Leave the others' files as they are."
    )
