"""Which files a shell command will write, and which one it prints whole: the meaning of a command line for
the agent-write protocol (coordinator/engine/agentwrites.py), read from the one shell parser
(coordinator/text/shell). Pure: a string in, values out.

A `Target` is a path the command names as a file it writes, with how:
- `whole`: the file is replaced by content that does not come from it (`> f`, `>| f`, `&> f`, `cat > f <<EOF`,
  `tee f`, `cp SRC f`, `mv SRC f`, `install SRC f`): the writer must have seen the current content first;
- `in_place`: the file is rewritten from itself (`sed -i`, `perl -pi`/`-i`, `>> f`, `tee -a f`, `truncate`,
  an `apply_patch` here-document's Update File): it must not change under the command;
- `remove`: `rm f`, `mv f ...` (its source);
- `script`: a file an interpreter's inline script names in a string literal (`python3 - <<EOF ... EOF`,
  `python3 -c '...'`): it may read it or write it, the parser cannot tell which; the protocol treats it as
  a target whose writer must not be behind (agentwrites.py), when the file exists.
Paths are as written, joined to the command's folder (`cd` before it) when relative; words the shell
expands at run time (variables, globs) are not targets (what the parser cannot see, the tree watcher does).

`printed_lines` is the file a read-only command prints lines of (`cat f`, `cat -n f`, `nl -ba f`, `head -n N f`,
`tail -n N f`, `sed -n 'A,Bp' f`, a whole print piped into one of those windows), and which lines: the
session's view (whole or partial) is recorded from what it printed, for every agent's shell alike.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from coordinator.text.shell import SimpleCommand, Word, parse

How = Literal["whole", "in_place", "remove", "script"]


@dataclass(frozen=True)
class Target:
    path: str
    how: How
    command: str  # the command's name, for the messages ("sed", "cat", ...)


_WHOLE_COPIERS = frozenset({"cp", "install"})
_PATCH_HOW: dict[str, How] = {"Update": "in_place", "Add": "whole", "Delete": "remove"}
_PATCH_LINE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+)$", re.MULTILINE)
_PYTHON = re.compile(r"^python(?:3(?:\.\d+)?)?$")
# A string literal of a script that could be a file's name: no newline, no shell or format syntax in it.
_LITERAL = re.compile(r"""(?<![\w])[rRbBuU]?(['"])([^'"\n{}<>|*?$]{1,255})\1""")


def write_targets(command: str) -> list[Target]:
    """The files `command` names as files it writes, in the order the shell would reach them (a path once,
    with its first way)."""
    out: dict[str, Target] = {}
    for cmd in parse(command).commands:
        for target in _of_command(cmd):
            out.setdefault(target.path, target)
    return list(out.values())


@dataclass(frozen=True)
class Printed:
    """What a read-only command printed of one file: lines `first`.. of it (`count` of them; None: to the
    end), or its last `count` lines (`from_end`); `numbered`: each line came with its number (`cat -n`,
    `nl -ba`), which `text` takes off."""

    path: str
    first: int
    count: int | None
    from_end: bool = False
    numbered: bool = False

    def text(self, output: str) -> str:
        """The file's own text in what the command printed."""
        return _NUMBERED.sub("", output) if self.numbered else output


_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+))?p$")
_NUMBERED = re.compile(r"^ *\d+\t", re.MULTILINE)  # cat -n's and nl -ba's "%6d\t" before each line
Window = tuple[int, "int | None", bool]  # first line, count (None: to the end), from the end


def printed_lines(command: str) -> Printed | None:
    """The one file `command` prints lines of, and which (module docstring): `cat F`, `cat -n F`, `nl -ba F`,
    `head -n N F` / `head -N F`, `tail -n N F` / `tail -N F` / `tail -n +K F`, `sed -n 'A,Bp' F` / `sed -n
    'Ap' F`, or a whole print piped into one of the windows (`nl -ba F | sed -n 'A,Bp'`, `cat -n F | head
    -n N`); nothing else in the line (`bash -lc '...'` around it is the parser's to take off). None for
    anything else: several files, other options, another command, output sent elsewhere. `grep F` is no
    read: it shows matching lines, not the file (as Claude Code's Grep tool does not count as its Read)."""
    script = parse(command)
    commands = script.commands
    if not script.certain or not 1 <= len(commands) <= 2 or any(_prints_elsewhere(c) for c in commands):
        return None
    shown = _of_file(commands[0])
    if shown is None or len(commands) == 1:
        return shown
    words = _literal_words(commands[1])
    window = None if words is None else _window(commands[1].name, words)
    if window is None or shown.count is not None or shown.first != 1 or shown.from_end:
        return None  # a window of a whole print, read from the pipe (no file named)
    return Printed(shown.path, window[0], window[1], window[2], shown.numbered)


def _prints_elsewhere(cmd: SimpleCommand) -> bool:
    return any(r.fd in (None, 1) and r.op != "<" for r in cmd.redirects)


def _literal_words(cmd: SimpleCommand) -> list[str] | None:
    words = cmd.argv[1:]
    return [w.text for w in words] if all(w.literal for w in words) else None


def _of_file(cmd: SimpleCommand) -> Printed | None:
    words = _literal_words(cmd)
    if not words or words[-1].startswith("-"):
        return None
    path = _joined(cmd, words[-1])
    options = words[:-1]
    numbered = (cmd.name == "cat" and options == ["-n"]) or (cmd.name == "nl" and options in (["-ba"], ["-b", "a"]))
    window = (1, None, False) if numbered else _window(cmd.name, options)
    return None if path is None or window is None else Printed(path, *window, numbered=numbered)


def _window(name: str, options: list[str]) -> Window | None:
    """The lines `name options` prints of its input (a file named after the options, or its standard input)."""
    if name == "cat" and not options:
        return 1, None, False
    count = "10" if not options and name in ("head", "tail") else _count(options)  # their default: 10 lines
    if name == "head" and count is not None and not count.startswith("+"):
        return 1, int(count), False
    if name == "tail" and count is not None:
        return (int(count[1:]), None, False) if count.startswith("+") else (1, int(count), True)
    if name == "sed" and len(options) == 2 and options[0] == "-n":
        m = _SED_RANGE.match(options[1])
        if m is not None:
            first = int(m.group(1))
            last = int(m.group(2)) if m.group(2) else first
            return (first, last - first + 1, False) if last >= first >= 1 else None
    return None


def _count(options: list[str]) -> str | None:
    """N of `-n N` / `-N` (`+K` kept as written: tail's "from line K"), else None."""
    if len(options) == 2 and options[0] == "-n" and options[1].lstrip("+").isdigit():
        return options[1] if int(options[1].lstrip("+")) >= 1 else None
    if len(options) == 1 and options[0].startswith("-") and options[0][1:].isdigit() and int(options[0][1:]) >= 1:
        return options[0][1:]
    return None


def _of_command(cmd: SimpleCommand) -> list[Target]:
    found = [_redirect_target(cmd, r.op, r.target) for r in cmd.redirects if r.writes_file and r.target is not None]
    targets = [t for t in found if t is not None]
    name = cmd.name
    args = cmd.argv[1:]
    if name == "tee":
        how: How = "in_place" if any(w.text in ("-a", "--append") for w in args) else "whole"
        targets += [Target(p, how, name) for p in _files(cmd, args)]
    elif name == "sed" and any(w.text.startswith("-i") or w.text.startswith("--in-place") for w in args):
        targets += [Target(p, "in_place", name) for p in _files(cmd, _sed_files(args))]
    elif name == "perl" and any(w.text.startswith("-") and "i" in w.text[1:] and not w.text.startswith("--")
                                for w in args):  # fmt: skip
        targets += [Target(p, "in_place", name) for p in _files(cmd, _perl_files(args))]
    elif name in _WHOLE_COPIERS | {"mv"}:
        names = [w for w in args if not w.text.startswith("-")]
        if len(names) >= 2 and "-t" not in [w.text for w in args]:
            targets += [Target(p, "whole", name) for p in _files(cmd, names[-1:])]
            if name == "mv":
                targets += [Target(p, "remove", name) for p in _files(cmd, names[:-1])]
    elif name == "rm":
        targets += [Target(p, "remove", name) for p in _files(cmd, [w for w in args if not w.text.startswith("-")])]
    elif name == "truncate":
        targets += [Target(p, "in_place", name) for p in _files(cmd, [w for w in args if not w.text.startswith("-")])]
    targets += _patch_targets(cmd)
    targets += _script_targets(cmd)
    return targets


def _script_targets(cmd: SimpleCommand) -> list[Target]:
    """A Python script given inline (`python3 - <<EOF`, `python3 -c CODE`): the names its string literals
    give (the caller keeps the files that exist). A script file (`python3 tool.py`) is not read."""
    if not _PYTHON.match(cmd.name or ""):
        return []
    args = [w.text for w in cmd.argv[1:]]
    codes = [r.heredoc for r in cmd.redirects if r.heredoc and r.op.startswith("<<")]
    if "-c" in args and args.index("-c") + 1 < len(args):
        codes.append(args[args.index("-c") + 1])
    elif any(a != "-" and not a.startswith("-") for a in args):
        return []  # a script file: its code is not on the command line
    out = []
    for code in codes:
        for _, name in _LITERAL.findall(code or ""):
            joined = _joined(cmd, name.strip()) if name.strip() and " " not in name.strip() else None
            if joined is not None:
                out.append(Target(joined, "script", cmd.name))
    return out


def _redirect_target(cmd: SimpleCommand, op: str, word: Word | None) -> Target | None:
    if word is None or not word.literal or word.text in ("/dev/null", "/dev/stdout", "/dev/stderr"):
        return None
    path = _joined(cmd, word.text)
    if path is None:
        return None
    return Target(path, "in_place" if op in (">>", "&>>", "<>") else "whole", cmd.name or "redirect")


def _files(cmd: SimpleCommand, words: list[Word] | tuple[Word, ...]) -> list[str]:
    out = []
    for w in words:
        if w.literal and not w.text.startswith("-"):
            path = _joined(cmd, w.text)
            if path is not None:
                out.append(path)
    return out


def _sed_files(args: tuple[Word, ...]) -> list[Word]:
    """sed's file operands: after the script (the first non-option word, unless -e/-f gave it)."""
    words = list(args)
    files: list[Word] = []
    script_given = False
    i = 0
    while i < len(words):
        t = words[i].text
        if t in ("-e", "-f", "--expression", "--file"):
            script_given = True
            i += 2
            continue
        if t.startswith("-"):
            i += 1
            continue
        if not script_given:
            script_given = True
        else:
            files.append(words[i])
        i += 1
    return files


def _perl_files(args: tuple[Word, ...]) -> list[Word]:
    words = list(args)
    files: list[Word] = []
    script_given = False
    i = 0
    while i < len(words):
        t = words[i].text
        if t in ("-e", "-E"):
            script_given = True
            i += 2
            continue
        if t.startswith("-"):
            script_given = script_given or t.endswith("e")
            i += 1 + (1 if t.endswith("e") and len(t) > 1 and not t.startswith("--") else 0)
            continue
        if script_given:
            files.append(words[i])
        else:
            script_given = True
        i += 1
    return files


def _patch_targets(cmd: SimpleCommand) -> list[Target]:
    """An `apply_patch <<EOF ... EOF` (Codex): the files its patch adds, updates or deletes."""
    if cmd.name not in ("apply_patch", "applypatch"):
        return []
    bodies = [r.heredoc for r in cmd.redirects if r.heredoc]
    bodies += [w.text for w in cmd.argv[1:2] if "*** Begin Patch" in w.text]
    out = []
    for body in bodies:
        for kind, path in _PATCH_LINE.findall(body or ""):
            joined = _joined(cmd, path.strip())
            if joined is not None:
                out.append(Target(joined, _PATCH_HOW[kind], "apply_patch"))
    return out


def _joined(cmd: SimpleCommand, path: str) -> str | None:
    """`path` relative to where the whole command line started (None: the folder is not known)."""
    if os.path.isabs(path):
        return path
    if cmd.cwd is None:
        return None
    return os.path.normpath(os.path.join(cmd.cwd, path))
