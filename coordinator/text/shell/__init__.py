"""The one shell parser: a command line as the simple commands a shell would run, for every judgement the
coordinator makes about shell commands (which files a command writes, whether a git command sweeps up other
sessions' work). Pure: a string in, values out; no I/O.

Built on tree-sitter-bash (the grammar GitHub and editors use), which reads here-documents, nested quotes and
substitutions that a hand-written or word-splitting reader gets wrong. `parse(line)` returns a `Script`:

- `commands`: every `SimpleCommand` in the order the shell would start it, found through lists (`;`, `&&`,
  `||`, `&`, newlines), pipelines, subshells `( )`, groups `{ ; }`, `if`/`while`/`until`/`for`/`case`,
  function bodies, command substitutions `$( )` and backticks, process substitutions `<( )`, the strings of
  `sh -c` / `bash -lc` (and a shell fed a here-document), `eval` strings, `find -exec`, `watch` (its words
  joined and run by `sh -c`), and the wrappers that only run another command (`env [-i] [-C DIR] [VAR=x]`,
  `command`, `builtin`, `time`, `sudo [-u U]`, `doas`, `nohup`, `exec`, `xargs [flags]`, `nice`, `ionice`,
  `stdbuf`, `timeout DURATION`), which are taken off and listed in `via`.
- each command's `argv` (`Word`: text without quotes, the raw source, `glob` and `expands` flags), its
  `assignments`, its `redirects` (`Redirect`: operator, descriptor, target word, here-document body and whether
  its delimiter was quoted; `writes_file` for the ones that open a file for writing), and `cwd`, the folder it
  runs in after the literal `cd`s before it (relative to where the line started; None when not known).
- `doubts`: what could not be judged with certainty (`Doubt.kind`: a parse error, a variable command name,
  `eval`, a script file, input read at run time, a non-literal `cd`, a shell string with expansions).

What a command means (which of its words are files it writes, what a git subcommand does) is for the caller:
this package only says how the shell would split and run the line.
"""

from coordinator.text.shell.model import WRITE_OPERATORS, Doubt, DoubtKind, Redirect, Script, SimpleCommand, Word
from coordinator.text.shell.walk import parse


def simple_commands(command: str) -> tuple[SimpleCommand, ...]:
    """Every simple command of `command` (see `parse`), doubts left aside."""
    return parse(command).commands


__all__ = [
    "WRITE_OPERATORS",
    "Doubt",
    "DoubtKind",
    "Redirect",
    "Script",
    "SimpleCommand",
    "Word",
    "parse",
    "simple_commands",
]
