"""Policy "rebase" in the check-then-write: carrying an edit over onto changes made since the session's
view, from local data only (this process's text cache, the history's object store)."""

from __future__ import annotations

import time

from coordinator.disk import fsio
from coordinator.engine.caches import _TextCache
from coordinator.engine.plan import CurrentFile, Edits, WritePlan, _CachedViewRefused, _view_refusal
from coordinator.engine.resources import Disk
from coordinator.errors import CoordinatorError
from coordinator.history import content_hash
from coordinator.state.views import ReadState
from coordinator.text import rebase
from coordinator.text.codecs import decode_bytes, encode_text

# A path whose view was found out of date this recently is "contended": a rebase there is tried before
# taking the lock (see Rebaser.early).
_CONTENDED_S = 2.0
_CONTENDED_MAX = 100_000


class AlreadyMade(Exception):
    """Policy "rebase": every change of the edit is already in the file, made by another write at the same
    place. Nothing is written; the engine answers the edit as made (`Recorder.already_made`) and the
    session's view becomes what it read plus its own edit (`rebased.view`), as after a rebased edit."""

    def __init__(
        self,
        key: str,
        rebased: rebase.RebaseOutcome,
        view_data: bytes,
        mtime_ns: int,
        hunks: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(key)
        self.key = key
        self.rebased = rebased
        self.view_data = view_data
        self.mtime_ns = mtime_ns
        self.hunks = hunks  # the edit's own changes, (old lines, new lines): what was found already made


class Rebaser:
    """The rebase of an edit made on an older view, and which paths are contended in this process. Its
    collaborators are the Coordinator's: the disk (the history's contents) and this process's text cache."""

    def __init__(self, disk: Disk, texts: _TextCache) -> None:
        self.disk = disk
        self._texts = texts
        self._contended: dict[str, float] = {}  # path -> when a view of it was last found out of date here

    def mark_contended(self, key: str) -> None:
        if len(self._contended) > _CONTENDED_MAX:
            self._contended.clear()
        self._contended[key] = time.monotonic()

    def is_contended(self, key: str) -> bool:
        """Has a view of this path been out of date lately (in this process)?"""
        seen = self._contended.get(key)
        return seen is not None and time.monotonic() - seen < _CONTENDED_S

    def early(
        self,
        dfd: int,
        rp: fsio.ResolvedPath,
        recorded: ReadState,
        edits: Edits,
        use_cache: bool,
    ) -> tuple[str, WritePlan] | None:
        """On a contended path, try the rebase before taking the lock, on the file as it is now.

        A refusal is final (nothing is written, and the bytes it was judged on are a real version of the
        file: writes replace it atomically), so a doomed edit never holds up the lock. A success is kept
        with the hash it was computed on; under the lock it is used only if the file still has that hash.
        """
        found = fsio.read_at(dfd, rp, self.disk.max_file_bytes)
        if found is None:
            return None
        data, st = found
        cur = CurrentFile(exists=True, data=data, st=st, digest=content_hash(data))
        refusal = _view_refusal(recorded, cur, rp)
        if refusal is None:
            return None  # the view is current now: nothing to carry over (judged again under the lock)
        plan = self.plan(recorded, cur, edits, rp, use_cache, refusal)
        assert cur.digest is not None
        return cur.digest, plan

    def plan(
        self,
        recorded: ReadState,
        cur: CurrentFile,
        edits: Edits,
        rp: fsio.ResolvedPath,
        use_cache: bool,
        strict: CoordinatorError,
    ) -> WritePlan:
        """Under the lock: carry `edits` from S's view (`recorded`) over onto the current file, or raise.

        Local disk and CPU only: the view's content comes from the history's object store. A view whose
        content is gone (retention, or an outside change right after S's own write) gets the strict
        answer, `strict` (the caller's judgement of the view, `_view_refusal`). With a cached view, any
        refusal is first checked against Redis (`_CachedViewRefused`).
        """
        try:
            base_text = self._texts.get(recorded.hash)
            if base_text is None:
                base_text = decode_bytes(self.disk.history.load(recorded.hash, rp.key)).text
            current = cur.decoded()
        except CoordinatorError:
            if use_cache:
                raise _CachedViewRefused(rp.key, recorded, strict) from None
            raise strict from None
        try:
            rb = rebase.rebase_edits(base_text, current.text, edits.specs, name=rp.shown, match=edits.match)
        except CoordinatorError as exc:
            exc.details["path"] = rp.key
            if use_cache:
                raise _CachedViewRefused(rp.key, recorded, exc) from None
            raise
        if rb.already:
            assert cur.st is not None
            own = rebase.diff_texts(base_text, rb.view)
            hunks = tuple(
                (base_text[x.a_start : x.a_start + x.a_len], rb.view[x.b_start : x.b_start + x.b_len]) for x in own
            )
            raise AlreadyMade(rp.key, rb, encode_text(rb.view, current.encoding), cur.st.st_mtime_ns, hunks)
        view_data = encode_text(rb.view, current.encoding)
        return WritePlan.of_edit(rb.outcome, current.encoding, rebased=rb, view_data=view_data)
