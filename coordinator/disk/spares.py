"""Empty temporaries made ahead in the state folder, outside any file's lock, for the next write to fill.

A replace writes the new content to a temporary, then swaps it in (fsio.atomic_replace). Creating that
temporary is a directory operation: with the unlink of the replaced content, it is the costliest system
call of the replace (strace -T in the solo loop (BENCHMARKS.md, "Figures behind design choices")), and neither
needs the lock. So the unlink happens after the lock (`_Written.old_temp`), and the creation of the next
write's temporary too: after each write `refill` makes spares up to `KEEP`, and the next write `take`s one
under its lock, where it only fills it and swaps it in. A write that finds none creates its own, as before.

Each spare is created with O_EXCL and kept open from then on, so what a write fills is the file it created:
nothing that appears under that name in between (a link planted in the state folder) is written through.

Per process: after a fork the child finds the parent's spares and closes its copies of their descriptors,
without using or removing them (the parent still owns them). A process that dies leaves its spare as an
empty temporary, which the next open of the state folder removes (`fsio.clean_stale_temps`).
"""

from __future__ import annotations

import contextlib
import itertools
import os

from coordinator.disk import fsio

#: How many spares a process keeps: one per write in flight at once is enough for a single writer thread;
#: a second covers a thread writing while another refills.
KEEP = 2

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
_open = os.open
_PID = fsio.PID  # this process's id, no system call (its at-fork hook renews it)
#: Numbers this process's spares, named ``.spare.ec-PID-sN.tmp``: a temporary of process PID to
#: `fsio.clean_stale_temps`, and never a name `fsio.temp_name` gives (its names end in ``-N.tmp``, N digits
#: only), so the two counters cannot clash, even for a file called "spare". `next` on it is atomic (one C
#: call under the GIL): no lock is needed.
_counter = itertools.count()


class SpareTemps:
    """The spares of one state folder's temporaries folder (`dfd`), for this process."""

    def __init__(self, dfd: int) -> None:
        self._dfd = dfd
        self._pid = _PID[0]
        self.owner = fsio.created_owner(dfd)  # what a spare is created with (`fsio.atomic_replace`'s spare_owner)
        self._free: list[tuple[str, int]] = []  # (name, descriptor open for writing); pop/append are atomic

    def take(self) -> tuple[str, int] | None:
        """A spare for `fsio.atomic_replace` (which closes its descriptor), or None: none is made yet."""
        if self._pid != _PID[0]:
            self._forget_the_parents()
        try:
            return self._free.pop()
        except IndexError:
            return None

    def refill(self) -> None:
        """Make spares up to `KEEP` (after a write, outside its lock). A failure only means the next write
        creates its own temporary, as it would without spares."""
        if self._pid != _PID[0]:
            self._forget_the_parents()
        free = self._free
        while len(free) < KEEP:
            name = f".spare.ec-{self._pid}-s{next(_counter)}.tmp"
            try:
                fd = _open(name, _FLAGS, 0o600, dir_fd=self._dfd)
            except OSError:
                return
            free.append((name, fd))

    def close(self) -> None:
        """Remove this process's spares (the owner closes `dfd` after this)."""
        self._forget_the_parents()
        while self._free:
            name, fd = self._free.pop()
            with contextlib.suppress(OSError):
                os.close(fd)
            fsio.remove_temp(self._dfd, name)

    def _forget_the_parents(self) -> None:
        if self._pid == _PID[0]:
            return
        parents, self._free = self._free, []
        self._pid = _PID[0]
        for _, fd in parents:
            with contextlib.suppress(OSError):
                os.close(fd)
