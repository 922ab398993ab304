"""Characters tree-sitter-bash 0.25 cannot be trusted with, swapped for stand-ins before it parses.

Its scanner reads out of bounds on a `{` followed later by a 4-byte UTF-8 character (a code point above
U+FFFF: emoji, CJK extensions) and the process dies with SIGSEGV on Linux (tree-sitter/tree-sitter-bash#337,
open; found here by the property tests). A hook process must never die on what a model wrote, so every such
character, and every lone surrogate, is replaced by a private-use character of the Basic Multilingual Plane
that the text does not hold, and put back in every string of the answer."""

from __future__ import annotations

import re
from dataclasses import replace

from coordinator.text.shell.model import Doubt, Redirect, Script, SimpleCommand, Word

_UNSAFE = re.compile("[\ud800-\udfff\U00010000-\U0010ffff]")
_PRIVATE = range(0xE000, 0xF900)


class StandIns:
    """The stand-ins of one parse: each unsafe character gets one, the same wherever it appears."""

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self._back: dict[int, str] = {}

    def protect(self, text: str) -> str:
        """`text` with every unsafe character replaced by its stand-in."""
        found = set(_UNSAFE.findall(text))
        if not found:
            return text
        free = (chr(cp) for cp in _PRIVATE if chr(cp) not in text and ord(chr(cp)) not in self._back)
        for ch in sorted(found - self.forward.keys()):
            stand_in = next(free, "\ufffd")  # 6,400 distinct astral characters in one line: the rest blur
            self.forward[ch] = stand_in
            if stand_in != "\ufffd":
                self._back[ord(stand_in)] = ch
        return _UNSAFE.sub(lambda m: self.forward[m.group()], text)

    def restore(self, script: Script) -> Script:
        """`script` with the original characters back in every string."""
        if not self._back:
            return script
        return Script(tuple(self._command(c) for c in script.commands), tuple(self._doubt(d) for d in script.doubts))

    def _s(self, text: str) -> str:
        return text.translate(self._back)

    def _word(self, w: Word) -> Word:
        return replace(w, text=self._s(w.text), raw=self._s(w.raw))

    def _doubt(self, d: Doubt) -> Doubt:
        return replace(d, detail=self._s(d.detail))

    def _redirect(self, r: Redirect) -> Redirect:
        return replace(
            r,
            target=self._word(r.target) if r.target else None,
            heredoc=self._s(r.heredoc) if r.heredoc is not None else None,
            heredoc_delimiter=self._s(r.heredoc_delimiter) if r.heredoc_delimiter is not None else None,
        )

    def _command(self, c: SimpleCommand) -> SimpleCommand:
        return SimpleCommand(
            argv=tuple(self._word(w) for w in c.argv),
            assignments=tuple((self._s(n), self._word(w)) for n, w in c.assignments),
            redirects=tuple(self._redirect(r) for r in c.redirects),
            cwd=self._s(c.cwd) if c.cwd is not None else None,
            via=tuple(self._s(v) for v in c.via),
            doubts=tuple(self._doubt(d) for d in c.doubts),
        )
