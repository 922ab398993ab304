"""Git's own argument grammar, for the guard: a shell command's git invocations with their global options
taken off (`-C`, `-c`, `--git-dir`, ...), aliases given by `-c alias.x=...` expanded, short options unclustered
(`-Av` is `-A -v`, `-am MSG` is `-a -m MSG`) and pathspecs told apart from option values, with or without
`--`. Pure: the shell line is read by the one shell parser (coordinator.text.shell)."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, field

from coordinator.text.shell import SimpleCommand, Word, parse
from coordinator.text.shell.wrappers import shell_call

# Global options whose value is the next word when not attached with `=` (git(1) OPTIONS).
_GLOBAL_VALUED = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"})
_GLOBAL_VALUED |= {"--attr-source"}
# Per subcommand: the options that take a value (short ones may be clustered: `-am MSG`, `-mMSG`).
_VALUED: dict[str, frozenset[str]] = {
    "commit": frozenset(
        {"-m", "--message", "-F", "--file", "-C", "--reuse-message", "-c", "--reedit-message", "--author"}
        | {"--date", "-t", "--template", "--fixup", "--squash", "--trailer", "--cleanup", "--pathspec-from-file"}
    ),
    "add": frozenset({"--chmod", "--pathspec-from-file"}),
    "checkout": frozenset({"-b", "-B", "--orphan", "--conflict", "--pathspec-from-file"}),
    "switch": frozenset({"-c", "--create", "-C", "--force-create", "--orphan", "--conflict"}),
    "restore": frozenset({"-s", "--source", "--conflict", "--pathspec-from-file"}),
    "stash": frozenset({"-m", "--message", "--pathspec-from-file"}),
    "rm": frozenset({"--pathspec-from-file"}),
    "reset": frozenset({"--pathspec-from-file"}),
    "clean": frozenset({"-e", "--exclude"}),
}
# Commands git ships (an unknown name may be an alias from the user's config).
BUILTINS = frozenset(
    [
        "add",
        "am",
        "annotate",
        "apply",
        "archive",
        "bisect",
        "blame",
        "branch",
        "bundle",
        "cat-file",
        "check-ignore",
        "checkout",
        "cherry",
        "cherry-pick",
        "citool",
        "clean",
        "clone",
        "commit",
        "config",
        "count-objects",
        "describe",
        "diff",
        "diff-files",
        "diff-index",
        "diff-tree",
        "difftool",
        "fetch",
        "format-patch",
        "fsck",
        "gc",
        "grep",
        "gui",
        "help",
        "init",
        "instaweb",
        "log",
        "ls-files",
        "ls-remote",
        "ls-tree",
        "merge",
        "merge-base",
        "mergetool",
        "mv",
        "notes",
        "pull",
        "push",
        "range-diff",
        "rebase",
        "reflog",
        "remote",
        "repack",
        "replace",
        "request-pull",
        "reset",
        "restore",
        "rev-list",
        "rev-parse",
        "revert",
        "rm",
        "shortlog",
        "show",
        "show-branch",
        "show-ref",
        "sparse-checkout",
        "stash",
        "status",
        "submodule",
        "switch",
        "tag",
        "update-index",
        "update-ref",
        "var",
        "verify-commit",
        "version",
        "whatchanged",
        "worktree",
        "write-tree",
        "hash-object",
        "read-tree",
        "commit-tree",
        "symbolic-ref",
        "for-each-ref",
        "cat-file",
        "maintenance",
        "lfs",
    ]
)


@dataclass(frozen=True)
class GitCall:
    """One git invocation: `sub` its subcommand, `options` (short ones one by one: `-A`, `-v`), `values` of the
    options that take one, `pathspecs` (the words that name files, as Words: glob and expansion flags kept),
    `cwd` the folder it runs in relative to where the line started (`-C` applied; None: not known), and
    `doubts` what could not be judged (an alias from the user's config, an unknown folder)."""

    sub: str
    options: tuple[str, ...] = ()
    values: dict[str, str] = field(default_factory=dict)
    pathspecs: tuple[Word, ...] = ()
    args: tuple[str, ...] = ()
    cwd: str | None = "."
    alias: str | None = None
    doubts: tuple[str, ...] = ()
    input_paths: bool = False  # more arguments come at run time (`xargs git add`, `find -exec git add {}`)

    def has(self, *names: str) -> bool:
        return any(n in self.options for n in names)


def _globals(argv: tuple[Word, ...]) -> tuple[int, list[str | None], list[str]]:
    """(index of the subcommand, the `-C` folders (None: not known before it runs), the `-c` settings) of
    `git ARGS`."""
    i, folders, settings = 1, list[str | None](), list[str]()
    while i < len(argv) and argv[i].text.startswith("-"):
        name, eq, value = argv[i].text.partition("=")
        known = not argv[i].expands
        if name in _GLOBAL_VALUED and not eq:
            value = argv[i + 1].text if i + 1 < len(argv) else ""
            known = i + 1 < len(argv) and not argv[i + 1].expands
            i += 1
        i += 1
        if name == "-C":
            folders.append(value if known else None)  # `git -C "$REPO"`: the folder is the variable's
        elif name == "-c":
            settings.append(value)
    return i, folders, settings


def _split_options(sub: str, words: tuple[Word, ...]) -> tuple[list[str], dict[str, str], list[Word]]:
    valued = _VALUED.get(sub, frozenset())
    options: list[str] = []
    values: dict[str, str] = {}
    paths: list[Word] = []
    i = 0
    while i < len(words):
        w = words[i]
        text = w.text
        if text == "--":
            paths.extend(words[i + 1 :])
            break
        if text.startswith("--") and len(text) > 2:
            name, eq, value = text.partition("=")
            options.append(name)
            if name in valued and not eq:
                value, i = (words[i + 1].text if i + 1 < len(words) else ""), i + 1
            if name in valued:
                values[name] = value
        elif text.startswith("-") and len(text) > 1 and not text[1].isdigit():
            i = _cluster(text, words, i, valued, options, values)
        else:
            paths.append(w)
        i += 1
    return options, values, paths


def _cluster(
    text: str, words: tuple[Word, ...], i: int, valued: frozenset[str], options: list[str], values: dict[str, str]
) -> int:
    """`-Av` -> -A, -v; `-am MSG` -> -a, -m MSG; `-mMSG` -> -m MSG. The index of the last word used."""
    for j, ch in enumerate(text[1:], start=1):
        opt = f"-{ch}"
        options.append(opt)
        if opt in valued:
            rest = text[j + 1 :]
            if rest:
                values[opt] = rest
            elif i + 1 < len(words):
                values[opt], i = words[i + 1].text, i + 1
            break
    return i


def _folder(cwd: str | None, folders: list[str | None]) -> str | None:
    for f in folders:
        if cwd is None or f is None:
            return None
        cwd = f if f.startswith("/") else posixpath.normpath(posixpath.join(cwd, f))
    return cwd


def _alias(settings: list[str], name: str) -> str | None:
    for setting in reversed(settings):
        key, _, value = setting.partition("=")
        if key.lower() == f"alias.{name}".lower():
            return value
    return None


def _call(command: SimpleCommand, config_alias: dict[str, str]) -> list[GitCall]:
    argv = command.argv
    start, folders, settings = _globals(argv)
    if start >= len(argv):
        return []
    sub, rest, alias = argv[start].text, argv[start + 1 :], None
    doubts = list(_doubt_texts(command))
    value = _alias(settings, sub) or config_alias.get(sub)
    if value is not None and sub not in BUILTINS:
        alias = f"{sub}={value}"
        if value.startswith("!"):
            return git_calls(value[1:], config_alias)  # a shell alias: its own git commands are judged
        try:
            expanded = tuple(Word(t, t) for t in shlex.split(value))
        except ValueError:
            expanded = ()
        if not expanded:
            return []
        sub, rest = expanded[0].text, expanded[1:] + rest
    elif sub not in BUILTINS and not argv[start].literal:
        doubts.append(f"`git {argv[start].raw}`: the subcommand is not known before it runs")
    elif sub not in BUILTINS:
        doubts.append(f"`git {sub}` is not a git command here: an alias from the user's git config is not judged")
    options, values, paths = _split_options(sub, rest)
    cwd = _folder(command.cwd, folders)
    more = any(d.kind == "input" for d in command.doubts)
    texts = tuple(w.text for w in rest)
    return [GitCall(sub, tuple(options), values, tuple(paths), texts, cwd, alias, tuple(doubts), more)]


def _doubt_texts(command: SimpleCommand) -> list[str]:
    return [d.detail for d in command.doubts]


def _is_git(command: SimpleCommand) -> bool:
    return bool(command.argv) and command.argv[0].literal and posixpath.basename(command.name) == "git"


def git_calls(line: str, config_alias: dict[str, str] | None = None) -> list[GitCall]:
    """Every git invocation in the shell line `line`, as git would read its arguments. `config_alias`: aliases
    known from the repository's config (name -> value)."""
    calls: list[GitCall] = []
    for command in parse(line).commands:
        if _is_git(command):
            calls.extend(_call(command, config_alias or {}))
    return calls


def line_doubts(line: str) -> list[str]:
    """What in `line` could hide a git command from the guard (a script, eval, a variable command name, a shell
    running the commands piped into it: `... | sh`)."""
    kinds = {"parse", "dynamic_name", "eval", "script", "dynamic_string", "depth"}
    script = parse(line)
    found = [d.detail for d in script.doubts if d.kind in kinds]
    for command in script.commands:
        if shell_call(command.argv) is not None:
            found.extend(d.detail for d in command.doubts if d.kind == "input")
    return list(dict.fromkeys(found))
