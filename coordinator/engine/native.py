"""The engine's part for writes it does not perform itself: an agent's own file tools, guarded through its
hooks (coordinator/agents/). `NativeWrites` is built by the Coordinator (`Coordinator.native`) with the
resources it shares with the other parts; the engine keeps the order of the I/O, the agents' adapter only
orders these steps around the agent's write.

- `judge_write`: would the session's write be refused as `not_read` / `stale` now (no
  lock, no change)?
- `prepare_write`: under the path's lock, judge the session's view against the bytes on disk once more and
  keep those bytes in the history as the pre-image (before the agent replaces the file).
- `record_write`: under the path's lock, the history entry of the agent's write (the kept pre-image and the
  bytes now on disk), then after the lock the session's new view, the path's version and head (the
  attribution) and the change event, in one round trip.
- `record_view`: after an agent's own read, the session's view from what it was shown (full or partial),
  or none when what it was shown is not the file.
- `forget_view`: drop a session's view; its next write is refused as unread.

The staleness rule stays `plan._view_refusal`'s (its one owner); the pre-image's storage is the history's
(`History.keep`, `History.record_kept`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.disk import fsio
from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.engine.observer import APPLIED, EngineObserver
from coordinator.engine.plan import CurrentFile, _view_refusal
from coordinator.engine.resources import Disk, StateAccess
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import HistoryEntry, content_hash
from coordinator.state import events as events_mod
from coordinator.state.views import KIND_READ, KIND_WRITE, ReadState
from coordinator.text import rebase
from coordinator.text.codecs import decode_bytes
from coordinator.text.semantics import EditSpec
from coordinator.text.undoing import put_back

if TYPE_CHECKING:
    from coordinator.engine.reading import Reader
    from coordinator.engine.write import CheckThenWrite

__all__ = ["Carried", "Found", "Judged", "NativeWrite", "NativeWrites"]


@dataclass(frozen=True)
class NativeWrite:
    """What `prepare_write` found under the lock: the path's key and the hash of the bytes kept as the
    pre-image (None: there was no file, the agent's write creates it)."""

    key: str
    before: str | None


@dataclass(frozen=True)
class Carried:
    """`prepare_carried`'s answer: the write prepared (`prepare_write`'s), and, when the session's view was
    out of date and its change was carried over (policy "rebase"), what was carried: `content`, the merged
    content a whole write is to write instead of its own; `changes`, the lines others changed since the view
    (current numbering; empty: the view was current, nothing carried)."""

    prepared: NativeWrite
    content: str | None = None
    changes: tuple[rebase.LineChange, ...] = ()


@dataclass(frozen=True)
class Found:
    """`record_found`'s answer. entry: the agent's write as recorded (None: nothing to record); st, lines: the
    file's stat then and the lines it changed. For a late write: overwritten, the sessions whose versions it
    had overwritten (oldest first); repair, the version that put their change back (None: the file already
    held it); how, "repair" (carried over), "restore" (put back whole) or "present"."""

    entry: HistoryEntry | None
    st: os.stat_result | None = None
    lines: tuple[int, int] = (1, 1)
    overwritten: tuple[str, ...] = ()
    repair: HistoryEntry | None = None
    repair_st: os.stat_result | None = None
    how: str = ""


@dataclass(frozen=True)
class Judged:
    """`judge_write`'s answer: the path's key, the session's recorded view (None: none), and the refusal
    the write would get now (None: it may go on)."""

    key: str
    view: ReadState | None
    refusal: CoordinatorError | None


class NativeWrites:
    """The engine's part for writes it does not perform itself (module docstring): built by the Coordinator
    with the resources it shares with the other parts (`Coordinator.native`)."""

    def __init__(self, disk: Disk, access: StateAccess, reader: Reader, writer: CheckThenWrite) -> None:
        self.disk = disk
        self.access = access
        self.reader = reader
        self.writer = writer
        self.observer: EngineObserver | None = None  # Coordinator.observe sets it

    def record_view(
        self,
        session: str,
        path: str,
        shown: str,
        start_line: int = 1,
        num_lines: int | None = None,
        *,
        from_end: bool = False,
    ) -> bool:
        """After an agent's own read of `path`: record `session`'s view of the file if `shown` (the text the
        agent was shown, lines `start_line`.. of the file, `num_lines` of them; None: to the end) is what the
        file holds there now. A window short of the whole file is a partial view (an edit may follow; a whole
        write needs a full read). When what was shown is not the file (it changed in between, or the agent's
        tool showed something else), the session's view is dropped instead, unless it was shown the whole of an
        earlier version that the history holds (`_older_view`: that version is its view). `from_end`: `shown`
        is the file's last `num_lines` lines (`tail`), wherever they start. Returns whether one was recorded."""
        rp = fsio.resolve(self.disk.root, path)
        cur = self._current(rp)
        try:
            text = cur.decoded().text if cur.exists else None
        except CoordinatorError:
            text = None
        lines = _text_lines(text) if text is not None else None
        if from_end and lines is not None and num_lines is not None:
            start_line = len(lines) - min(num_lines, len(lines)) + 1
        start = max(start_line, 1)
        count = len(lines) - start + 1 if lines is not None and num_lines is None else (num_lines or 0)
        if lines is None or lines[start - 1 : start - 1 + count] != _text_lines(shown)[: max(count, 0)] or count < 0:
            if start == 1 and num_lines is None and self._older_view(session, rp, shown):
                return True
            self.forget_view(session, path)
            return False
        assert cur.st is not None and cur.digest is not None
        partial = start > 1 or start - 1 + count < len(lines)
        offset, limit = (start, max(count, 1)) if partial else (0, 0)
        rs = ReadState(cur.digest, cur.st.st_mtime_ns, cur.st.st_size, offset, limit, time.time(), KIND_READ)
        self.reader.record_read(session, rp.key, rs)
        return True

    def _older_view(self, session: str, rp: fsio.ResolvedPath, shown: str) -> bool:
        """A whole read that showed an earlier version of the file (another write landed between the agent's
        read and its after-hook): when the history holds that version (UTF-8 text, as shown), it is the
        session's view. Its next write is then judged against it: `stale` (it changed since), carried over
        under policy "rebase", where a dropped view would have been refused `not_read`."""
        if not shown:
            return False
        for text in (shown, shown[:-1] if shown.endswith("\n") else shown + "\n"):
            data = text.encode("utf-8", "surrogatepass")
            digest = content_hash(data)
            if self.disk.history.has(digest, rp.key):
                rs = ReadState(digest, 0, len(data), 0, 0, time.time(), KIND_READ)
                self.reader.record_read(session, rp.key, rs)
                return True
        return False

    def view_of(self, session: str, path: str) -> ReadState | None:
        """`session`'s recorded view of `path` (None: none), without looking at the file."""
        key = fsio.resolve(self.disk.root, path).key
        return self.access.call(lambda: self.access.store.get(session, key))

    def judge_write(self, session: str, path: str, *, whole: bool = False) -> Judged:
        """Would `session`'s write of `path` be refused as `not_read` or `stale` right now (no lock, nothing
        changed)? No refusal: its view is the file on disk, or the file does not exist yet (a write may create
        it). `whole`: the write replaces the whole file, so a partial view (a read of some lines) is not enough.
        A stale refusal after an outside change says so, and never names the session itself."""
        rp = fsio.resolve(self.disk.root, path)
        cur = self._current(rp)
        recorded = self.view_of(session, rp.key) if cur.exists else None
        refusal = _judged(recorded, cur, rp, whole) if cur.exists else None
        return Judged(rp.key, recorded, self._explained(refusal, rp.key, session))

    def prepare_write(
        self, session: str, path: str, *, whole: bool = False, view: ReadState | None = None
    ) -> NativeWrite:
        """Before the agent's own write of `path`, under the path's lock: the session's view is judged against
        the bytes on disk (raises `not_read` / `stale`, or the content's refusal), and those bytes are kept in
        the history as the write's pre-image. The caller holds the write ticket: no other hooked write of the
        path can come in between this and `record_write`. `view`: the session's view as `judge_write` just
        found it (saves a round trip; the disk decides either way), else it is looked up."""
        rp = fsio.resolve(self.disk.root, path)
        recorded = view if view is not None else self.view_of(session, rp.key)
        held = self.disk.locks.acquire(rp.key)
        try:
            cur = self._current(rp)
            self.disk.history.reconcile(held, rp.key, cur.digest)
            if not cur.exists:
                return NativeWrite(rp.key, None)
            refusal = _judged(recorded, cur, rp, whole)
            if refusal is None:
                assert cur.digest is not None
                try:
                    self.disk.history.keep(held, rp.key, cur.data, cur.digest)
                except OSError as exc:
                    raise fsio.os_error(exc, rp) from exc
                return NativeWrite(rp.key, cur.digest)
        finally:
            held.release()
        explained = self._explained(refusal, rp.key, session)
        assert explained is not None
        raise explained

    def prepare_carried(
        self,
        session: str,
        path: str,
        view: ReadState,
        *,
        whole: bool = False,
        edits: tuple[EditSpec, ...] = (),
        content: str | None = None,
    ) -> Carried:
        """`prepare_write` under policy "rebase", for an agent's write made on `view`, an older version of the
        file (docs/agents/agent-writes.md, "Policy rebase"). Under the path's lock, with the caller holding
        the write ticket: when the view is current, as `prepare_write`; when it is out of date, its change is
        carried over by the rebase rule, from the view's version in the history to the bytes on disk now, or
        the stale refusal raised as without the policy. `edits`: the agent's Edit (old -> new), which its tool
        will apply to the file as it is now: allowed only when that lands as the rebase would
        (`rebase.replay_edits`). `content`: the agent's whole write, merged 3-way (`rebase.merge_write`);
        the merge is the content the agent is to write instead (its hook answer rewrites the tool's input)."""
        rp = fsio.resolve(self.disk.root, path)
        held = self.disk.locks.acquire(rp.key)
        try:
            cur = self._current(rp)
            self.disk.history.reconcile(held, rp.key, cur.digest)
            if not cur.exists:
                return Carried(NativeWrite(rp.key, None))
            strict = _judged(view, cur, rp, whole)
            carried = Carried(NativeWrite(rp.key, cur.digest))
            if strict is not None:
                if strict.code != ErrorCode.STALE:
                    raise strict
                carried = self._carried(rp, view, cur, strict, edits, content)
            assert cur.digest is not None
            try:
                self.disk.history.keep(held, rp.key, cur.data, cur.digest)
            except OSError as exc:
                raise fsio.os_error(exc, rp) from exc
            return carried
        except CoordinatorError as exc:
            explained = self._explained(exc, rp.key, session)
            assert explained is not None
            raise explained from None
        finally:
            held.release()

    def _carried(
        self,
        rp: fsio.ResolvedPath,
        view: ReadState,
        cur: CurrentFile,
        strict: CoordinatorError,
        edits: tuple[EditSpec, ...],
        content: str | None,
    ) -> Carried:
        """The rebase of an agent's write from `view` onto `cur` (`prepare_carried`), or a STALE refusal:
        `strict` when nothing can be carried (no change given, the view's version gone from the history, a
        file that is not text), else the rebase's own, which names the lines in the way."""
        if not edits and content is None:
            raise strict
        try:
            base = decode_bytes(self.disk.history.load(view.hash, rp.key)).text
            current = cur.decoded().text
        except CoordinatorError:
            raise strict from None
        try:
            if content is not None:
                merged = rebase.merge_write(base, content, current, name=rp.shown)
                return Carried(NativeWrite(rp.key, cur.digest), merged.text, merged.changes)
            replayed = rebase.replay_edits(base, current, edits, name=rp.shown)
        except CoordinatorError as exc:
            exc.details["path"] = rp.key
            raise
        return Carried(NativeWrite(rp.key, cur.digest), None, replayed.changes)

    def record_write(
        self, session: str, prepared: NativeWrite, operation: str, call: str | None = None
    ) -> HistoryEntry | None:
        """After the agent's own write: `record_found`'s entry of it (None: nothing recorded)."""
        return self.record_found(session, prepared, operation, call).entry

    def record_found(
        self,
        session: str,
        prepared: NativeWrite,
        operation: str,
        call: str | None = None,
        window: tuple[int, int] | None = None,
        writing: bool = False,
    ) -> Found:
        """After the agent's own write of `prepared.key` (`prepared.before`: the version it was allowed to
        change): the history entry of the bytes now on disk, attributed to `session`, then the session's new
        view, the path's version and the change event. Nothing is recorded when the file is unchanged or gone,
        or its bytes are already the newest version.

        A late write (invariant 7 (c), docs/agents/agent-writes.md): when the newest recorded version is no longer
        the one the agent was allowed to change (its ticket lapsed, or Redis lost it, and another writer's
        acknowledged version came in between), the agent's write is recorded as it landed, then the
        overwritten change is put back under the same lock: carried onto the agent's result by the rebase
        rule when the two commute (3-way: the agent's view, the version it overwrote, what it wrote), else
        the overwritten version is restored whole (the agent's write stays on record, undoable). The repair
        is a version of its own, attributed to the overwritten version's writer. A Redis failure after the
        entries raises state_unavailable; the entries stand. `window`: the session's view was partial (offset,
        limit) and stays so (its tool's answer did not show it the file): a whole write still needs a read.
        `writing`: the agent's tool may still be writing (the tree watcher saw a change of an open call's file):
        an empty file is then a write half-way (truncated, not yet written) and nothing is recorded; looked at
        under the lock, since the tool can truncate the file between any earlier look and this one."""
        rp = fsio.resolve(self.disk.root, prepared.key)
        held = self.disk.locks.acquire(rp.key)
        try:
            found = self._found_locked(held, rp, session, prepared, operation, call, writing)
        finally:
            held.release()
        if found.entry is None:
            return found
        late = found.repair is not None or found.overwritten
        self._record_state(session, rp.key, found.entry, found.st, found.lines, view=not late, window=window)
        if late:
            self.forget_view(session, rp.key)  # it has not seen what the file holds now
        if found.repair is not None:
            self._record_state(found.overwritten[-1], rp.key, found.repair, found.repair_st, (1, 1), view=False)
        return found

    def record_outside(
        self, key: str, author: str, *, created: bool = False, operation: str = "outside"
    ) -> HistoryEntry | None:
        """A change of `key` that no write of the coordinator's recorded (the tree watcher saw it): a version
        by `author` from the newest version to the bytes on disk. A file with no version yet is taken from
        its last git commit when git tracks it (the version's pre-image is then the committed content), else
        recorded as a creation when it was just `created`, else its bytes are kept as the baseline of the
        next change and nothing is recorded. None: nothing
        recorded (no change, no file, not text of a size the coordinator handles)."""
        rp = fsio.resolve(self.disk.root, key)
        committed: bytes | None = None
        for attempt in range(2):  # the second, with the committed content, when the path has no version yet
            held = self.disk.locks.acquire(rp.key)
            try:
                found = self._outside_locked(
                    held, rp, author, committed, baseline=attempt > 0, created=created, operation=operation
                )
            finally:
                held.release()
            if found is not None:
                break
            committed = _committed(self.disk.root, rp.key)
        else:
            return None
        if found.entry is not None:
            self._record_state(author, rp.key, found.entry, found.st, found.lines, view=False)
        return found.entry

    def _outside_locked(
        self,
        held: Any,
        rp: fsio.ResolvedPath,
        author: str,
        committed: bytes | None,
        *,
        baseline: bool,
        created: bool = False,
        operation: str = "outside",
    ) -> Found | None:
        """`record_outside` under the lock; None: the path has no version yet and `baseline` is not given
        (the caller looks up the committed content, outside the lock, and comes again)."""
        try:
            cur = self._current(rp)
            if cur.exists:
                cur.decoded()  # text only: a binary or undecodable file stays out of the history
        except CoordinatorError:
            return Found(None)
        if not cur.exists:
            return Found(None)
        assert cur.digest is not None
        self.disk.history.reconcile(held, rp.key, cur.digest)
        head = self.disk.history.read_head(held)
        if head.digest == cur.digest:
            return Found(None)
        try:
            if (head.digest is None or head.at is None) and created and head.counter == 0:
                return self._found_locked(held, rp, author, NativeWrite(rp.key, None), operation, None)
            if head.digest is None or head.at is None:
                if not baseline:
                    return None
                base = committed if committed is not None else cur.data
                self.disk.history.keep(held, rp.key, base, content_hash(base))
                if committed is None or content_hash(base) == cur.digest:
                    return Found(None)
                head = self.disk.history.read_head(held)
        except OSError as exc:
            raise fsio.os_error(exc, rp) from exc
        return self._found_locked(held, rp, author, NativeWrite(rp.key, head.digest), operation, None)

    def _found_locked(
        self,
        held: Any,
        rp: fsio.ResolvedPath,
        session: str,
        prepared: NativeWrite,
        operation: str,
        call: str | None,
        writing: bool = False,
    ) -> Found:
        cur = self._current(rp)
        if not cur.exists or cur.digest == prepared.before or (writing and not cur.data):
            return Found(None)
        assert cur.st is not None and cur.digest is not None
        self.disk.history.reconcile(held, rp.key, cur.digest)
        head = self.disk.history.read_head(held)
        if head.digest == cur.digest:
            return Found(None)  # already recorded (another hook of this call, or the watcher, came first)
        overwritten = head.digest if head.digest != prepared.before else None
        if overwritten is not None and head.at is None:
            overwritten = None  # no version to put back: the agent's write is recorded from the head
        base = prepared.before if overwritten is None else head.digest
        first, last = self._changed_lines(NativeWrite(rp.key, base), cur)
        try:
            entry = self.disk.history.record_kept(
                held, rp.key, before_digest=base, after=cur.data, after_digest=cur.digest, session=session,
                operation=operation, call=call, size_after=len(cur.data), first_line=first, last_line=last,
            )  # fmt: skip
        except OSError as exc:
            raise fsio.os_error(exc, rp) from exc
        if entry is None or overwritten is None:
            return Found(entry, st=cur.st, lines=(first, last))
        writers = self._writers_since(rp.key, prepared.before, entry.version)
        repaired = self._put_back(held, rp, prepared.before, overwritten, cur, writers[-1] if writers else "outside")
        return Found(
            entry, st=cur.st, lines=(first, last), overwritten=tuple(writers) or ("outside",),
            repair=repaired[0] if repaired else None, repair_st=repaired[1] if repaired else None,
            how=repaired[2] if repaired else "present",
        )  # fmt: skip

    def writers_since(self, key: str, before: str | None) -> list[str]:
        """The sessions of the versions of `key` recorded after the one that left `before`, oldest first."""
        return self._writers_since(fsio.resolve(self.disk.root, key).key, before, 1 << 62)

    def _writers_since(self, key: str, before: str | None, late_version: int) -> list[str]:
        """The sessions of the versions recorded after the one that left `before` (the agent's view), up to
        the late write's own, oldest first."""
        out: list[str] = []
        for e in self.disk.history.entries(key):  # newest first
            if e.version >= late_version:
                continue
            if e.after == before:
                break
            if e.session not in out:
                out.insert(0, e.session)
        return out

    def _put_back(
        self, held: Any, rp: fsio.ResolvedPath, view: str | None, overwritten: str, cur: CurrentFile, writer: str
    ) -> tuple[HistoryEntry, os.stat_result, str] | None:
        """Under the lock, after a late write: the overwritten change carried onto the file (`repair`), or
        the overwritten version restored (`restore`). None when the file already holds the change."""
        base = b"" if view is None else self.disk.history.load(view, rp.key)
        theirs = self.disk.history.load(overwritten, rp.key)
        data, how = put_back(base, theirs, cur.data)
        if data == cur.data:
            return None
        assert cur.st is not None and cur.digest is not None
        digest = content_hash(data)
        first, last = _differing_lines(cur.data.decode("utf-8", "replace").split("\n"),
                                       data.decode("utf-8", "replace").split("\n"))  # fmt: skip
        pending = self.disk.history.begin(
            held, rp.key, before=cur.data, before_digest=cur.digest, after=data, after_digest=digest,
            session=writer, operation=how, size_before=len(cur.data), size_after=len(data),
            first_line=first, last_line=last,
        )  # fmt: skip
        dfd = fsio.open_parent(rp, self.disk.root, root_fd=self.disk.root_fd)
        try:
            st = fsio.atomic_replace(dfd, rp, data, cur.st.st_mode & 0o7777, self.disk.fsync)
        except BaseException:
            self.disk.history.abort(held, pending)
            raise
        finally:
            os.close(dfd)
        self.disk.history.commit(held, pending)
        return pending.entry, st, how

    def _record_state(
        self,
        session: str,
        key: str,
        entry: HistoryEntry,
        st: os.stat_result | None,
        lines: tuple[int, int],
        *,
        view: bool = True,
        window: tuple[int, int] | None = None,
    ) -> None:
        """The Redis side of a recorded agent write: the session's view (`view`: it has seen the result), the
        path's version and the change event in one round trip, then this process's cached view and the
        observer."""
        now = time.time()
        digest = entry.after
        offset, limit = window or (0, 0)
        kind = KIND_READ if window else KIND_WRITE
        rs = ReadState(digest or "", st.st_mtime_ns if st else 0, st.st_size if st else 0, offset, limit, now, kind)

        def event(pipe: object) -> None:
            if self.access.publish_events:
                events_mod.queue_event(
                    pipe,
                    self.access.namespace,
                    path=key,
                    session=session,
                    version=entry.version,
                    operation=entry.operation,
                    ranges=[lines],
                    when=now,
                    digest=digest,
                    rebased=False,
                )

        self.access.views.drop(session, key)
        if not view or st is None:
            self.access.call(
                lambda: self.access.store.record_head(session, key, entry.version, entry.operation, digest, event)
            )
        else:
            self.access.call(
                lambda: self.access.store.record_write(
                    session, key, rs, entry.version, entry.operation, digest=digest, extra=event
                )
            )
            self.access.views.put(session, key, rs)
        observer = self.observer
        if observer is not None:  # an agent's own write, told as the engine's writes are (observer.py)
            observer.write_finished(entry.operation, APPLIED)
            if self.access.publish_events:
                observer.event_published()

    def key_in_root(self, path: str) -> str | None:
        """`path`'s key when it is inside the root (and not in the state folder), else None."""
        try:
            key = fsio.resolve(self.disk.root, path).key
        except CoordinatorError:
            return None
        return None if key.split("/")[0] == STATE_DIR_NAME else key

    def keep_pre_image(self, path: str) -> str | None:
        """Under the path's lock, keep its current bytes in the history as the pre-image of a write another
        program is about to make (no view judged: a shell command that edits in place reads the file itself).
        The hash kept (None: no file)."""
        rp = fsio.resolve(self.disk.root, path)
        held = self.disk.locks.acquire(rp.key)
        try:
            cur = self._current(rp)
            self.disk.history.reconcile(held, rp.key, cur.digest)
            if cur.exists and cur.digest is not None:
                try:
                    self.disk.history.keep(held, rp.key, cur.data, cur.digest)
                except OSError as exc:
                    raise fsio.os_error(exc, rp) from exc
            return cur.digest
        finally:
            held.release()

    def unchanged(self, path: str, digest: str | None) -> bool:
        """Whether `path` still holds the content of hash `digest` (None: still does not exist). No lock."""
        return self._current(fsio.resolve(self.disk.root, path)).digest == digest

    def forget_view(self, session: str, path: str) -> None:
        """Drop `session`'s view of `path`: what it was shown is not the file (its next write is `not_read`)."""
        rp = fsio.resolve(self.disk.root, path)
        self.access.views.drop(session, rp.key)
        self.access.call(lambda: self.access.store.forget(session, rp.key))

    def _current(self, rp: fsio.ResolvedPath) -> CurrentFile:
        """The file as it is now (a missing file, or a missing folder on the way, is `exists=False`)."""
        try:
            dfd = fsio.open_parent(rp, self.disk.root, root_fd=self.disk.root_fd)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                return CurrentFile(exists=False)
            raise
        try:
            found = fsio.read_at(dfd, rp, self.disk.max_file_bytes)
        finally:
            os.close(dfd)
        if found is None:
            return CurrentFile(exists=False)
        data, st = found
        return CurrentFile(exists=True, data=data, st=st, digest=content_hash(data))

    def _explained(self, refusal: CoordinatorError | None, key: str, session: str) -> CoordinatorError | None:
        """A stale refusal says who changed the file, or that it changed outside the coordinator (never naming
        the refused session as the writer then)."""
        if refusal is not None and refusal.code == ErrorCode.STALE:
            refusal.message += self.writer.stale_detail(key, session)
        return refusal

    def _changed_lines(self, prepared: NativeWrite, cur: CurrentFile) -> tuple[int, int]:
        """The lines of the new file that the agent's write changed (1, 1 when the texts cannot be compared)."""
        if prepared.before is None:
            return 1, max(cur.data.count(b"\n"), 1)
        try:
            old = self.disk.history.load(prepared.before, prepared.key).decode("utf-8")
            new = cur.data.decode("utf-8")
        except (CoordinatorError, UnicodeDecodeError):
            return 1, 1
        return _differing_lines(old.split("\n"), new.split("\n"))


def _judged(
    recorded: ReadState | None, cur: CurrentFile, rp: fsio.ResolvedPath, whole: bool
) -> CoordinatorError | None:
    """The staleness rule (`_view_refusal`), and for a write of the whole file, a full view."""
    refusal = _view_refusal(recorded, cur, rp)
    partial = recorded is not None and recorded.kind == KIND_READ and (recorded.offset > 1 or recorded.limit > 0)
    if refusal is None and whole and partial:
        assert recorded is not None
        return CoordinatorError(
            ErrorCode.NOT_READ,
            f"{rp.shown} was read only in part (lines from {max(recorded.offset, 1)}); a write replaces the "
            "whole file. Read the whole file first, then write it.",
            path=rp.key,
        )
    return refusal


def _text_lines(text: str) -> list[str]:
    """The lines of a text as a reader compares them: CRLF as LF, no final empty line."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _differing_lines(old: list[str], new: list[str]) -> tuple[int, int]:
    """The first and last line of `new` that differ from `old` (common head and tail left out)."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    first = head + 1
    return first, max(len(new) - tail, first)


def _committed(root: str, key: str) -> bytes | None:
    """`key`'s content in the last git commit of the work tree at `root` (None: not tracked, no git)."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", root, "show", f"HEAD:{key}"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
