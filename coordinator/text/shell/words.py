"""Shell words and redirections from tree-sitter-bash nodes: quotes and escapes removed, run-time expansions
left as written and flagged. Pure: a node and the source it came from in, a value out."""

from __future__ import annotations

import re

from tree_sitter import Node

from coordinator.text.shell.model import Redirect, Word

_EXPANDING = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
    }
)
_GLOB_CHARS = re.compile(r"(?<!\\)[*?\[]")
_BRACES = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")
_WORD_ESCAPE = re.compile(r"\\(\n|.)", re.DOTALL)
_DQ_ESCAPE = re.compile(r'\\([$`"\\\n])')
_ANSI_C = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL)
_ANSI_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f"}
_ANSI_SIMPLE |= {"v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def node_text(node: Node) -> str:
    """The node's source text (the command string the tree was parsed from is always text)."""
    raw = node.text or b""
    return raw.decode("utf-8", "replace")


def _ansi_c(match: re.Match[str]) -> str:
    esc = match.group(1)
    if esc in _ANSI_SIMPLE:
        return _ANSI_SIMPLE[esc]
    if esc[0] in "xuU":
        return chr(min(int(esc[1:], 16), 0x10FFFF))
    if esc[0].isdigit():
        return chr(int(esc, 8) & 0xFF)
    if esc[0] == "c":
        return chr(ord(esc[1]) & 0x1F)
    return "\\" + esc


def _unquoted_piece(raw: str) -> tuple[str, bool, bool]:
    """An unquoted `word` token: escapes removed; glob characters and a leading `~` noticed."""
    glob = bool(_GLOB_CHARS.search(raw))
    text = _WORD_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), raw)
    return text, glob, False


def _piece(node: Node) -> tuple[str, bool, bool]:
    """(text, glob, expands) of one part of a word."""
    kind, raw = node.type, node_text(node)
    if kind in ("word", "number"):
        return _unquoted_piece(raw)
    if kind == "raw_string":
        return raw[1:-1], False, False
    if kind == "ansi_c_string":
        return _ANSI_C.sub(_ansi_c, raw[2:-1]), False, False
    if kind in ("string", "translated_string"):
        inner = raw[1:-1] if kind == "string" else raw[2:-1]
        expands = any(child.type in _EXPANDING for child in node.named_children)
        return _DQ_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), inner), False, expands
    if kind == "brace_expression":
        return raw, True, False
    if kind == "concatenation":
        parts = [_piece(child) for child in node.named_children]
        text = "".join(p[0] for p in parts)
        glob = any(p[1] for p in parts) or _braces(node)
        return text, glob, any(p[2] for p in parts)
    return raw, False, True  # expansions, substitutions and anything unforeseen: not known before run time


def _braces(node: Node) -> bool:
    """A brace expansion (`{a,b}`, `{1..3}`) spread over a concatenation's unquoted parts."""
    unquoted = "".join(node_text(c) if c.type == "word" else "\0" for c in node.named_children)
    return bool(_BRACES.search(unquoted))


def word(node: Node) -> Word:
    """The Word a node stands for; a `command_name` wrapper is looked through."""
    if node.type == "command_name" and node.named_children:
        node = node.named_children[0]
    raw = node_text(node)
    text, glob, expands = _piece(node)
    first = node.named_children[0] if node.type == "concatenation" and node.named_children else node
    if first.type == "word" and raw.startswith("~"):
        expands = True
    return Word(text=text, raw=raw, glob=glob, expands=expands)


def _line_start(src: bytes, pos: int) -> int:
    return src.rfind(b"\n", 0, pos) + 1


def _heredoc_body(node: Node, src: bytes, strip_tabs: bool) -> str:
    """The here-document's text: from the line after its start to the line holding its end delimiter.

    Taken from the source rather than the body node, which leaves out the first line's indentation and keeps
    the end line's; `<<-` removes leading tabs from every line, as the shell does."""
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    end = next((c for c in node.children if c.type == "heredoc_end"), None)
    stop = _line_start(src, end.start_byte) if end is not None else len(src)
    if body is None:
        return ""
    text = src[_line_start(src, body.start_byte) : stop].decode("utf-8", "replace")
    if strip_tabs:
        text = "".join(line.lstrip("\t") for line in text.splitlines(keepends=True))
    return text


def heredoc(node: Node, src: bytes) -> Redirect:
    """A `heredoc_redirect` node (`<<` or `<<-`)."""
    op = next((c.type for c in node.children if c.type in ("<<", "<<-")), "<<")
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    delimiter = node_text(start) if start is not None else ""
    quoted = any(ch in delimiter for ch in "'\"\\")
    return Redirect(
        op=op,
        target=None,
        fd=_descriptor(node),
        heredoc=_heredoc_body(node, src, op == "<<-"),
        heredoc_quoted=quoted,
        heredoc_delimiter=re.sub(r"['\"\\]", "", delimiter),
    )


def _descriptor(node: Node) -> int | None:
    fd = node.child_by_field_name("descriptor")
    if fd is None:
        fd = next((c for c in node.children if c.type == "file_descriptor"), None)
    text = node_text(fd) if fd is not None else ""
    return int(text) if text.isdigit() else None


def file_redirect(node: Node) -> tuple[Redirect, list[Word]]:
    """A `file_redirect` or `herestring_redirect` node: the redirection, and the words tree-sitter-bash put in
    it that belong to the command instead (`echo a >f b`: `b` is echo's argument)."""
    op = next((c.type for c in node.children if not c.is_named), ">")
    targets = [c for c in node.named_children if c.type != "file_descriptor"]
    target = word(targets[0]) if targets else None
    return Redirect(op=op, target=target, fd=_descriptor(node)), [word(t) for t in targets[1:]]
