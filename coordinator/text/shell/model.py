"""What the shell parser answers: words, redirections, simple commands and the doubts met on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DoubtKind = Literal["parse", "dynamic_name", "eval", "script", "input", "cd", "dynamic_string", "depth"]

# Redirection operators that open their target for writing (`>&WORD` too when WORD is not a descriptor).
WRITE_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word. `text` is its value with quotes and escapes removed; expansions the shell would make at
    run time (`$x`, `${x}`, `$(...)`, backticks, `$((...))`, a leading `~`) are left as written, and `expands`
    says the value is not known. `glob` says it holds an unquoted `*`, `?`, `[...]` or `{a,b}` that the shell
    would expand into file names (or several words), so `text` is a pattern, not a name."""

    text: str
    raw: str
    glob: bool = False
    expands: bool = False

    @property
    def literal(self) -> bool:
        """True when the shell passes `text` through unchanged."""
        return not (self.glob or self.expands)


@dataclass(frozen=True, slots=True)
class Redirect:
    """One redirection. `op` is the operator as written (`>`, `>>`, `>|`, `&>`, `&>>`, `<`, `<>`, `>&`, `<&`,
    `<<`, `<<-`, `<<<`); `fd` the explicit descriptor (`2` in `2>err`), None when implied. `target` is the file
    (or descriptor) word; None for a here-document, whose text is in `heredoc` (leading tabs already removed
    for `<<-`). `heredoc_quoted`: the delimiter was quoted, so the body is taken literally; otherwise it may
    hold `$` expansions and command substitutions (which the parser reports as commands of their own)."""

    op: str
    target: Word | None
    fd: int | None = None
    heredoc: str | None = None
    heredoc_quoted: bool = False
    heredoc_delimiter: str | None = None

    @property
    def writes_file(self) -> bool:
        """True when the redirection opens `target` as a file for writing (truncating or appending)."""
        if self.target is None:
            return False
        if self.op in WRITE_OPERATORS:
            return True
        return self.op == ">&" and not (self.target.text.isdigit() or self.target.text == "-")


@dataclass(frozen=True, slots=True)
class Doubt:
    """Something the parser could not judge with certainty. `kind`: `parse` (not valid shell), `dynamic_name`
    (the command name is a variable or substitution), `eval`, `script` (a script file or program whose
    commands are not visible: `bash f.sh`, `source f`, `./run`), `input` (commands or arguments read at run
    time: `xargs`, `find -exec`, `bash` fed by a pipe), `cd` (a folder change that is not literal),
    `dynamic_string` (a `bash -c` or `eval` string holding expansions), `depth` (nesting too deep)."""

    kind: DoubtKind
    detail: str


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command as the shell would run it.

    `argv`: its words after the wrappers that only run another command (`env`, `sudo`, `command`, `time`,
    `nohup`, `exec`, `xargs`, `nice`, `timeout`, ... and the string of `sh -c` / `bash -lc`) are taken off;
    those are listed, outermost first, in `via`. `assignments`: the `NAME=value` words before it (and those
    given to `env`/`sudo`). `redirects`: its own redirections, then those of the enclosing groups, loops or
    `bash -c` it runs in. `cwd`: the folder it runs in relative to where the whole command started (`.`:
    there; an absolute path after `cd /abs`), made only from literal `cd`/`pushd` (and `env -C`, `sudo -D`);
    None when a folder change before it is not literal. `doubts`: what about this command is not certain."""

    argv: tuple[Word, ...]
    assignments: tuple[tuple[str, Word], ...] = ()
    redirects: tuple[Redirect, ...] = ()
    cwd: str | None = "."
    via: tuple[str, ...] = ()
    doubts: tuple[Doubt, ...] = ()

    @property
    def name(self) -> str:
        """The command name's text (`""` for a bare redirection such as `> file`)."""
        return self.argv[0].text if self.argv else ""

    @property
    def args(self) -> tuple[str, ...]:
        """The text of every word after the name."""
        return tuple(w.text for w in self.argv[1:])


@dataclass(frozen=True, slots=True)
class Script:
    """A whole command line: every simple command in the order the shell would start them, and every doubt
    (the commands' own and those of the line itself, such as a parse error), without repeats."""

    commands: tuple[SimpleCommand, ...]
    doubts: tuple[Doubt, ...] = field(default=())

    @property
    def certain(self) -> bool:
        """True when nothing in the line was beyond the parser's judgement."""
        return not self.doubts
