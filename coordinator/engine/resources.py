"""The resources the engine's parts share, grouped into two records that the Coordinator builds once.

`Disk`: what the parts reach the repository and the state folder through (descriptors, locks, history,
temporaries, the size limit and the durability). `StateAccess`: the read state in Redis, the guard of every
call to it, and what this process keeps of it (views, texts by hash, refusal counts, what sessions read).
A part takes the records it works with; the objects in them are the same for every part (one view cache,
one lock manager), never copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.disk.locks import LockManager
from coordinator.disk.spares import SpareTemps
from coordinator.engine.caches import StateCalls, _RefusalCounts, _TextCache, _ViewCache
from coordinator.engine.options import StateCheck
from coordinator.history import History
from coordinator.state.events import ReadTracker
from coordinator.state.views import StateStore


@dataclass(frozen=True, slots=True)
class Disk:
    """The disk side of one Coordinator.

    root: the repository root (real path); root_fd: its descriptor, from which every folder is reached
    one checked component at a time (fsio.open_parent); tmp_dfd: the state folder's temporaries' folder;
    spares: temporaries made ahead, outside the locks (spares.py); locks: the paths' locks; history: the
    versions of every path; fsync: durability "fsync"; max_file_bytes: the hard cap on any file."""

    root: str
    root_fd: int
    tmp_dfd: int
    spares: SpareTemps
    locks: LockManager
    history: History
    fsync: bool
    max_file_bytes: int


@dataclass(frozen=True, slots=True)
class StateAccess:
    """The read state of one Coordinator.

    store: the state store in Redis; call: the guard of every Redis call of the engine (it forgets `views`
    when Redis is lost, caches.py); views: the views this process recorded; texts: file texts by content
    hash (for a rebase); refusals: refusals counted here, flushed on the next post-write round trip;
    tracker: what each session read, for notices (None: notices are off); namespace: the repository's
    name in Redis; publish_events: a change event per write; check: where a view comes from before a
    write ("cached" or "always")."""

    store: StateStore
    call: StateCalls
    views: _ViewCache
    texts: _TextCache
    refusals: _RefusalCounts
    tracker: ReadTracker | None
    namespace: str
    publish_events: bool
    check: StateCheck
