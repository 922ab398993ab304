"""Commands that only run another command: `env`, `sudo`, `command`, `time`, `nohup`, `exec`, `xargs`, `nice`,
`timeout`, ... Each is described by the options that take a value; `unwrap` takes them off one after the other
and says what it took off. Pure: words in, words out."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from coordinator.text.shell.model import Doubt, Word


@dataclass(frozen=True, slots=True)
class _Wrapper:
    valued: frozenset[str] = frozenset()  # options whose value is the next word (or attached: `-uroot`)
    assigns: bool = False  # NAME=value words before the command are assignments (env, sudo)
    positionals: int = 0  # words to skip after the options before the command (timeout's duration)
    chdir: frozenset[str] = frozenset()  # options naming the folder the command runs in
    queries: frozenset[str] = frozenset()  # options that make it not run the command (`command -v git`)
    doubt: str | None = None  # what it adds that the parser cannot see


def _opts(*names: str) -> frozenset[str]:
    return frozenset(names)


WRAPPERS: dict[str, _Wrapper] = {
    "env": _Wrapper(
        _opts("-u", "--unset", "-C", "--chdir", "-S", "--split-string"), assigns=True, chdir=_opts("-C", "--chdir")
    ),
    "sudo": _Wrapper(
        _opts("-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C", "--close-from", "-r", "--role")
        | _opts("-t", "--type", "-T", "--command-timeout", "-U", "--other-user", "-D", "--chdir"),
        assigns=True,
        chdir=_opts("-D", "--chdir"),
        queries=_opts("-l", "--list", "-v", "--validate", "-k", "-K", "-e", "--edit"),
    ),
    "doas": _Wrapper(_opts("-u", "-C")),
    "command": _Wrapper(queries=_opts("-v", "-V")),
    "builtin": _Wrapper(),
    "time": _Wrapper(_opts("-f", "--format", "-o", "--output")),
    "nohup": _Wrapper(),
    "exec": _Wrapper(_opts("-a")),
    "nice": _Wrapper(_opts("-n", "--adjustment")),
    "ionice": _Wrapper(_opts("-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid")),
    "stdbuf": _Wrapper(_opts("-i", "--input", "-o", "--output", "-e", "--error")),
    "timeout": _Wrapper(_opts("-s", "--signal", "-k", "--kill-after"), positionals=1),
    "xargs": _Wrapper(
        _opts("-I", "-n", "--max-args", "-P", "--max-procs", "-d", "--delimiter", "-L", "--max-lines", "-s")
        | _opts("--max-chars", "-E", "--eof", "-a", "--arg-file", "--process-slot-var"),
        doubt="xargs adds arguments read from its input",
    ),
}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """The command a wrapper runs: its words, the assignments and folder change the wrapper gave it, what the
    wrapper added that cannot be seen, and the wrapper as written (`sudo -u bob`)."""

    argv: tuple[Word, ...]
    assignments: tuple[tuple[str, Word], ...]
    chdir: Word | None
    doubt: Doubt | None
    label: str


def _option(w: Word, valued: frozenset[str]) -> tuple[bool, bool]:
    """(is an option, takes the next word as its value)."""
    text = w.text
    if not text.startswith("-") or text == "-":
        return False, False
    if text.startswith("--"):
        return True, "=" not in text and text in valued
    return True, text in valued  # `-uroot`: the value attached; `-n5`, `-10`: one word


def unwrap(argv: tuple[Word, ...]) -> Unwrapped | None:
    """The command that `argv` runs when `argv[0]` is a wrapper and names one; None otherwise (not a wrapper,
    a query such as `command -v git`, or a wrapper with no command such as `env` alone)."""
    if not argv or not argv[0].literal:
        return None
    spec = WRAPPERS.get(posixpath.basename(argv[0].text))
    if spec is None:
        return None
    i, chdir, assignments = 1, None, []
    while i < len(argv):
        w = argv[i]
        if w.text == "--":
            i += 1
            break
        is_opt, takes_value = _option(w, spec.valued)
        if not is_opt:
            break
        if w.text.split("=", 1)[0] in spec.queries:
            return None
        if takes_value and w.text in spec.chdir and i + 1 < len(argv):
            chdir = argv[i + 1]
        elif w.text.startswith("--") and w.text.split("=", 1)[0] in spec.chdir:
            chdir = Word(w.text.split("=", 1)[1], w.raw, w.glob, w.expands)
        i += 2 if takes_value else 1
    while spec.assigns and i < len(argv) and _ASSIGNMENT.match(argv[i].text):
        name, value = argv[i].text.split("=", 1)
        assignments.append((name, Word(value, argv[i].raw, argv[i].glob, argv[i].expands)))
        i += 1
    i += spec.positionals
    if i >= len(argv):
        return None
    doubt = Doubt("input", spec.doubt) if spec.doubt else None
    label = " ".join(w.text for w in argv[:i])
    return Unwrapped(argv[i:], tuple(assignments), chdir, doubt, label)


_WATCH_VALUED = frozenset({"-n", "--interval", "-q", "--equexit"})


@dataclass(frozen=True, slots=True)
class WatchCall:
    """`watch [options] CMD...`: the command's words, whether they run as they are (`-x`, `--exec`) or joined
    by spaces as one `sh -c` string (watch's default), and the label (`watch -n 1`)."""

    argv: tuple[Word, ...]
    exec_: bool
    label: str


def watch_call(argv: tuple[Word, ...]) -> WatchCall | None:
    """The command `watch` runs again and again; None when `argv` is not `watch` or names no command."""
    if not argv or not argv[0].literal or posixpath.basename(argv[0].text) != "watch":
        return None
    i, exec_ = 1, False
    while i < len(argv) and argv[i].text.startswith("-") and argv[i].text != "-":
        text = argv[i].text
        if text == "--":
            i += 1
            break
        exec_ = exec_ or text in ("-x", "--exec") or (not text.startswith("--") and "x" in text[1:])
        i += 2 if text in _WATCH_VALUED else 1
    if i >= len(argv):
        return None
    return WatchCall(argv[i:], exec_, " ".join(w.text for w in argv[:i]))


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh"})
_SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


@dataclass(frozen=True, slots=True)
class ShellCall:
    """A shell run as a command: the string of `-c` (None when it runs a script file or reads its input), the
    script file (None with `-c` or with no file), and the label (`bash -lc`)."""

    string: Word | None
    script: Word | None
    label: str


def shell_call(argv: tuple[Word, ...]) -> ShellCall | None:
    """`sh -c STRING`, `bash -lc STRING`, `bash FILE`, `bash` (commands from its input); None when `argv` is
    not a shell."""
    if not argv or not argv[0].literal or posixpath.basename(argv[0].text) not in _SHELLS:
        return None
    i, has_c = 1, False
    while i < len(argv):
        text = argv[i].text
        if text == "--" or text == "-":
            i += 1
            break
        if text[:1] not in ("-", "+") or len(text) < 2:
            break
        if not text.startswith("--") and "c" in text[1:]:
            has_c = True
        i += 2 if text in _SHELL_VALUED else 1
    label = " ".join(w.text for w in argv[:i])
    rest = argv[i:]
    if has_c:
        return ShellCall(rest[0] if rest else None, None, label)
    return ShellCall(None, rest[0] if rest else None, label)
