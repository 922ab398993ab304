"""The walk over tree-sitter-bash's tree: every simple command in the order a shell would start it, with the
folder a literal `cd` left it in, through lists, pipelines, subshells, groups, conditionals and loops,
command and process substitutions, `bash -c` strings and the wrappers of wrappers.py."""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from coordinator.text.shell import words
from coordinator.text.shell.model import Doubt, Redirect, Script, SimpleCommand, Word
from coordinator.text.shell.standins import StandIns
from coordinator.text.shell.wrappers import shell_call, unwrap, watch_call

MAX_DEPTH = 8  # nested `bash -c` / `eval` strings parsed before giving up with a `depth` doubt
_LANGUAGE = Language(tree_sitter_bash.language())
_LOCAL = threading.local()  # a tree-sitter Parser is not safe to share between threads

_STATEMENTS = frozenset(
    {
        "command",
        "redirected_statement",
        "list",
        "pipeline",
        "subshell",
        "compound_statement",
        "if_statement",
        "elif_clause",
        "else_clause",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "case_item",
        "do_group",
        "function_definition",
        "negated_command",
        "declaration_command",
        "unset_command",
        "test_command",
        "variable_assignment",
        "variable_assignments",
        "program",
        "ERROR",
    }
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "herestring_redirect", "heredoc_redirect"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _parser() -> Parser:
    parser: Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = Parser(_LANGUAGE)
    return parser


@dataclass(frozen=True, slots=True)
class _Ctx:
    src: bytes
    via: tuple[str, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    depth: int = 0


def _first_error(node: Node) -> Node | None:
    if node.is_error or node.is_missing:
        return node
    for child in node.children:
        if child.has_error or child.is_missing:
            found = _first_error(child)
            if found is not None:
                return found
    return None


def _parse_doubt(root: Node) -> Doubt:
    bad = _first_error(root) or root
    near = words.node_text(bad).strip().splitlines()[:1] or [bad.type]
    what = f"`{near[0][:60]}`" if not bad.is_missing else f"a missing `{bad.type}`"
    return Doubt("parse", f"the command is not valid shell near {what} (line {bad.start_point[0] + 1})")


def _name_doubt(argv: tuple[Word, ...]) -> Doubt | None:
    """What the command's name leaves unknown: a variable name, a script file, a folder change."""
    if not argv:
        return None
    name, rest = argv[0], argv[1:]
    if name.expands:
        return Doubt("dynamic_name", f"the command name `{name.raw}` is not known before it runs")
    if name.text in ("source", ".") and rest:
        return Doubt("script", f"`{name.text} {rest[0].raw}` runs a script file the parser does not read")
    if "/" in name.text and not name.text.startswith("/"):
        return Doubt("script", f"`{name.raw}` is a program of the tree the parser does not read")
    return None


def _cd(cwd: str | None, args: tuple[Word, ...]) -> tuple[str | None, Doubt | None]:
    """The folder after `cd ARGS` run in `cwd` (None: not known)."""
    targets = [a for a in args if a.text == "-" or not a.text.startswith("-")]
    if not targets:
        return None, Doubt("cd", "`cd` without a folder goes to the home folder, which is not known")
    target = targets[0]
    if not target.literal or target.text == "-":
        return None, Doubt("cd", f"the folder of `cd {target.raw}` is not known before it runs")
    if target.text.startswith("/"):
        return posixpath.normpath(target.text), None
    return (posixpath.normpath(posixpath.join(cwd, target.text)) if cwd is not None else None), None


class Walk:
    """One walk over a command line; `commands` and `doubts` grow as it goes."""

    def __init__(self) -> None:
        self.commands: list[SimpleCommand] = []
        self.doubts: list[Doubt] = []
        self.cwd: str | None = "."
        self.stand_ins = StandIns()
        self.after: list[tuple[Node, _Ctx]] = []  # what follows a here-document's start, walked after its command

    def script(self, text: str, ctx: _Ctx) -> None:
        if ctx.depth > MAX_DEPTH:
            self.doubts.append(Doubt("depth", f"shell strings nested more than {MAX_DEPTH} deep are not read"))
            return
        src = self.stand_ins.protect(text).encode("utf-8")
        root = _parser().parse(src).root_node
        if root.has_error:
            self.doubts.append(_parse_doubt(root))
        self.statement(root, replace(ctx, src=src))

    @contextmanager
    def subshell(self, cwd: str | None = None, *, enter: bool = False) -> Iterator[None]:
        """A subshell: a folder change inside it is forgotten when it ends."""
        saved = self.cwd
        if enter:
            self.cwd = cwd
        try:
            yield
        finally:
            self.cwd = saved

    def statement(self, node: Node, ctx: _Ctx) -> None:
        kind = node.type
        if kind == "command":
            self.command(node, [], [], ctx)
        elif kind == "redirected_statement":
            self.redirected(node, ctx)
        elif kind == "subshell":
            with self.subshell():
                self.children(node, ctx)
        elif kind == "pipeline":
            for child in node.named_children:  # each part of a pipeline runs in a subshell of its own
                with self.subshell():
                    self.statement(child, ctx) if child.type in _STATEMENTS else self.scan(child, ctx)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            via = (*ctx.via, f"function {words.node_text(name) if name else ''}".strip())
            self.children(node, replace(ctx, via=via))
        elif kind in ("declaration_command", "unset_command"):
            self.scan(node, ctx)
            argv = (Word(node.children[0].type, node.children[0].type),)
            self.emit(argv + tuple(words.word(c) for c in node.named_children), (), [], ctx, [])
        else:
            self.children(node, ctx)

    def children(self, node: Node, ctx: _Ctx) -> None:
        for child in node.named_children:
            if child.type in _STATEMENTS:
                self.statement(child, ctx)
            elif child.type != "comment":
                self.scan(child, ctx)

    def scan(self, node: Node, ctx: _Ctx) -> None:
        """The command and process substitutions anywhere inside a word, expression or redirection."""
        if node.type in _SUBSTITUTIONS:
            with self.subshell():
                self.children(node, ctx)
            return
        for child in node.children:
            if child.type in _SUBSTITUTIONS or child.child_count:
                self.scan(child, ctx)

    def redirections(self, node: Node, ctx: _Ctx, into: list[Redirect], extra: list[Word]) -> None:
        """A redirection node. tree-sitter-bash hangs the rest of a here-document's first line on its node: the
        redirections written after it, and the commands (`cat <<EOF | bash`, `cat > f <<EOF && git add -A`),
        which are kept in `after` and walked once the command the here-document feeds is recorded."""
        if node.type != "heredoc_redirect":
            self.scan(node, ctx)
            redirect, stray = words.file_redirect(node)
            into.append(redirect)
            extra.extend(stray)
            return
        into.append(words.heredoc(node, ctx.src))
        unread: list[str] = []  # `cat <<EOF; git stash`: the grammar takes `;` into the delimiter and the rest as words
        for child in node.named_children:
            if child.type in _REDIRECTS:
                self.redirections(child, ctx, into, extra)
            elif child.type in _STATEMENTS:
                self.after.append((child, ctx))
            elif child.type == "word":
                unread.append(words.node_text(child))
            else:
                self.scan(child, ctx)
        if unread:
            self.doubts.append(Doubt("parse", f"`{' '.join(unread)}` after a here-document's start is not read"))

    def walk_after(self, mark: int) -> None:
        """Walk the commands that followed a here-document's start (kept in `after` since `mark`)."""
        pending, self.after[mark:] = self.after[mark:], []
        for node, ctx in pending:
            self.statement(node, ctx)

    def redirected(self, node: Node, ctx: _Ctx) -> None:
        body = node.child_by_field_name("body")
        own: list[Redirect] = []
        extra: list[Word] = []
        mark = len(self.after)
        for child in node.named_children:
            if child.type in _REDIRECTS:
                self.redirections(child, ctx, own, extra)
        if body is None:
            self.emit(tuple(extra), (), own, ctx, [])
        else:
            self.tail_redirected(body, own, extra, ctx)
        self.walk_after(mark)

    def tail_redirected(self, body: Node, own: list[Redirect], extra: list[Word], ctx: _Ctx) -> None:
        """Redirections written after a list or pipeline belong to its last command (`a && b > f` writes f from
        b only), though tree-sitter-bash hangs them on the whole list; after a group or loop, to all of it."""
        if body.type == "command":
            self.command(body, own, extra, ctx)
        elif body.type in ("list", "pipeline"):
            *head, last = body.named_children
            for child in head:
                with self.subshell() if body.type == "pipeline" else nullcontext():
                    self.statement(child, ctx) if child.type in _STATEMENTS else self.scan(child, ctx)
            with self.subshell() if body.type == "pipeline" else nullcontext():
                self.tail_redirected(last, own, extra, ctx)
        else:
            self.statement(body, replace(ctx, redirects=(*own, *ctx.redirects)))

    def command(self, node: Node, redirects: list[Redirect], extra: list[Word], ctx: _Ctx) -> None:
        """A `command` node; split where tree-sitter-bash 0.25 wrongly joined two commands across a newline
        (`a | b | c <newline> d && e` comes back as `c d`, with no error): a newline between two words always
        ends a simple command (an escaped one is a line continuation and is not seen here)."""
        parts: list[list[Node]] = [[]]
        end = node.start_byte
        for child in node.named_children:
            gap = ctx.src[end : child.start_byte]
            if b"\n" in gap.replace(b"\\\n", b"") and parts[-1]:
                parts.append([])
            parts[-1].append(child)
            end = child.end_byte
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            self.command_words(part, redirects if last else [], extra if last else [], ctx)

    def command_words(self, nodes: list[Node], redirects: list[Redirect], extra: list[Word], ctx: _Ctx) -> None:
        argv: list[Word] = []
        assignments: list[tuple[str, Word]] = []
        own: list[Redirect] = []
        mark = len(self.after)
        for child in nodes:
            if child.type in _REDIRECTS:
                self.redirections(child, ctx, own, extra)
                continue
            self.scan(child, ctx)
            if child.type == "variable_assignment" and not argv:
                name, value = child.child_by_field_name("name"), child.child_by_field_name("value")
                text = words.node_text(name) if name else ""
                assignments.append((text, words.word(value) if value else Word("", "")))
            elif child.type != "comment":
                argv.append(words.word(child))
        self.run((*argv, *extra), tuple(assignments), [*own, *redirects], ctx, [])
        self.walk_after(mark)

    def run(
        self,
        argv: tuple[Word, ...],
        assignments: tuple[tuple[str, Word], ...],
        redirects: list[Redirect],
        ctx: _Ctx,
        doubts: list[Doubt],
    ) -> None:
        """A simple command's words: wrappers taken off, shell strings read, then the command recorded."""
        cwd = self.cwd
        while (inner := unwrap(argv)) is not None:
            argv, assignments = inner.argv, (*assignments, *inner.assignments)
            ctx = replace(ctx, via=(*ctx.via, inner.label))
            doubts = [*doubts, inner.doubt] if inner.doubt else doubts
            if inner.chdir is not None:
                cwd = _cd(cwd, (inner.chdir,))[0]
        with self.subshell(cwd, enter=True):
            if self.shell(argv, assignments, redirects, ctx, doubts):
                return
            if argv and argv[0].literal and argv[0].text == "eval":
                self.eval(argv, redirects, ctx, doubts)
                return
            if self.watch(argv, redirects, ctx, doubts):
                return
            if argv and argv[0].literal and posixpath.basename(argv[0].text) == "find":
                self.find_exec(argv, redirects, ctx, doubts)
            self.emit(argv, assignments, redirects, ctx, doubts)
        if argv and argv[0].literal and argv[0].text in ("cd", "pushd"):
            self.cwd = _cd(self.cwd, argv[1:])[0]
        elif argv and argv[0].text == "popd":
            self.cwd = None

    def shell(
        self,
        argv: tuple[Word, ...],
        assignments: tuple[tuple[str, Word], ...],
        redirects: list[Redirect],
        ctx: _Ctx,
        doubts: list[Doubt],
    ) -> bool:
        """`bash -lc STRING` and friends: the string's commands, in a new shell. True when handled here."""
        call = shell_call(argv)
        if call is None:
            return False
        inner = _nested(ctx, call.label, redirects)
        if call.string is not None:
            if call.string.expands:
                self.doubts.append(Doubt("dynamic_string", f"`{call.label} {call.string.raw}` holds expansions"))
            self.script(call.string.text, inner)
            return True
        stdin = next((r for r in redirects if r.op in ("<<", "<<-", "<<<")), None)
        if call.script is None and stdin is not None:
            fed = stdin.heredoc if stdin.heredoc is not None else stdin.target.text if stdin.target else ""
            others = tuple(r for r in redirects if r is not stdin)
            self.script(fed, replace(inner, redirects=(*others, *ctx.redirects)))
            return True
        if call.script is not None:
            doubt = Doubt("script", f"`{call.label} {call.script.raw}` runs a script file the parser does not read")
        else:
            doubt = Doubt("input", f"`{call.label}` runs commands read from its input")
        self.emit(argv, assignments, redirects, ctx, [*doubts, doubt])
        return True

    def eval(self, argv: tuple[Word, ...], redirects: list[Redirect], ctx: _Ctx, doubts: list[Doubt]) -> None:
        shown = " ".join(w.text for w in argv[1:])[:60]
        self.doubts.append(Doubt("eval", f"`eval {shown}` runs a string as a command"))
        self.joined(argv[1:], "eval", redirects, ctx)

    def joined(self, argv: tuple[Word, ...], label: str, redirects: list[Redirect], ctx: _Ctx) -> None:
        """`argv` joined by spaces and run as a shell string (`eval`, `watch`): that string's commands."""
        string = " ".join(w.text for w in argv)
        if any(not w.literal for w in argv):
            self.doubts.append(Doubt("dynamic_string", f"`{label} {string[:60]}` holds expansions"))
        self.script(string, _nested(ctx, label, redirects))

    def watch(self, argv: tuple[Word, ...], redirects: list[Redirect], ctx: _Ctx, doubts: list[Doubt]) -> bool:
        """`watch CMD...`: CMD's words joined by spaces and run by `sh -c` (or as they are with `-x`), read as
        that string's commands. True when handled here."""
        call = watch_call(argv)
        if call is None:
            return False
        if call.exec_:
            self.run(call.argv, (), [], _nested(ctx, call.label, redirects), doubts)
        else:
            self.joined(call.argv, call.label, redirects, ctx)
        return True

    def find_exec(self, argv: tuple[Word, ...], redirects: list[Redirect], ctx: _Ctx, doubts: list[Doubt]) -> None:
        """`find ... -exec CMD {} ;`: CMD is a command of its own, run once per file found."""
        i = 1
        while i < len(argv):
            if argv[i].text not in _FIND_EXEC:
                i += 1
                continue
            end = next((j for j in range(i + 1, len(argv)) if argv[j].text in (";", "+")), len(argv))
            doubt = Doubt("input", f"`find {argv[i].text}` runs its command once per file found ({{}} stands for each)")
            if end > i + 1:
                self.run(argv[i + 1 : end], (), [], replace(ctx, via=(*ctx.via, f"find {argv[i].text}")), [doubt])
            i = end + 1

    def emit(
        self,
        argv: tuple[Word, ...],
        assignments: tuple[tuple[str, Word], ...],
        redirects: list[Redirect],
        ctx: _Ctx,
        doubts: list[Doubt],
    ) -> None:
        doubt = _name_doubt(argv)
        if argv and argv[0].text in ("cd", "pushd"):
            doubt = _cd(self.cwd, argv[1:])[1]
        doubts = [*doubts, doubt] if doubt else doubts
        command = SimpleCommand(
            argv=argv,
            assignments=assignments,
            redirects=(*redirects, *ctx.redirects),
            cwd=self.cwd,
            via=ctx.via,
            doubts=tuple(doubts),
        )
        self.commands.append(command)


def _nested(ctx: _Ctx, label: str, redirects: list[Redirect]) -> _Ctx:
    """The context of the commands a command runs (`bash -c`, `eval`, `watch`): one level deeper, via it."""
    return replace(ctx, via=(*ctx.via, label), redirects=(*redirects, *ctx.redirects), depth=ctx.depth + 1)


def parse(command: str) -> Script:
    """Every simple command of the shell line `command` and every doubt met (see the package's docstring).

    Never raises: text that is not valid shell gives what could be read of it and a `parse` doubt."""
    walk = Walk()
    try:
        walk.script(command, _Ctx(src=b""))
    except RecursionError:
        walk.doubts.append(Doubt("depth", "the command is nested too deep to read"))
    seen: dict[Doubt, None] = {}
    for doubt in (*walk.doubts, *(d for c in walk.commands for d in c.doubts)):
        seen.setdefault(doubt)
    return walk.stand_ins.restore(Script(commands=tuple(walk.commands), doubts=tuple(seen)))
