"""What the Coordinator's step mixins share, declared once for the type checker.

`Coordinator` is assembled from mixins, one per part of the work (leasing, write, record, reading,
rebasing, intervening), so that each step is a short module. They all work on one object: the attributes
that `Coordinator.__init__` sets, and a few methods that one mixin calls on another. `_CoordinatorBase`
declares them, with annotations only: it adds no attribute and no method at run time (the methods are
declared under TYPE_CHECKING), so the MRO finds every real definition exactly where it was, and mypy checks
each use against these types and each definition against these signatures.

Invariant: every name declared here is defined by `Coordinator` (its `__init__` or
`_init_process_state`) or by one of the mixins; a declaration with no definition would pass the type
check and fail at run time, so tests/coordinator/engine/test_base.py checks that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import redis

    from coordinator.disk import fsio
    from coordinator.disk.locks import LockManager
    from coordinator.disk.spares import SpareTemps
    from coordinator.engine.caches import _RefusalCounts, _TextCache, _ViewCache
    from coordinator.engine.intervening import _Intervening
    from coordinator.engine.leasing import LeaseGate
    from coordinator.engine.observer import EngineObserver
    from coordinator.engine.options import StateCheck
    from coordinator.errors import CoordinatorError
    from coordinator.history import History
    from coordinator.state.events import ReadTracker
    from coordinator.state.leases import LeaseStore
    from coordinator.state.views import Extra, ReadState, StateStore

_T = TypeVar("_T")


class _CoordinatorBase:
    """The attributes and cross-mixin methods of a Coordinator (declarations only; see the module)."""

    # Set by Coordinator.__init__: configuration, the disk, Redis.
    root: str
    namespace: str
    state_check: StateCheck
    fsync: bool
    max_file_bytes: int
    max_read_bytes: int
    default_read_lines: int
    locks: LockManager
    history_store: History
    redis: redis.Redis
    state: StateStore
    lease_store: LeaseStore
    publish_events: bool
    tracker: ReadTracker | None
    observer: EngineObserver | None
    _tmp_dfd: int
    _spares: SpareTemps
    _root_fd: int

    # Set by Coordinator._init_process_state: what this process keeps between calls.
    _views: _ViewCache
    _refusals: _RefusalCounts
    lease_gate: LeaseGate
    _texts: _TextCache
    _seen_writes: dict[tuple[str, str], _Intervening]
    _contended: dict[str, float]
    _call_local: threading.local

    if TYPE_CHECKING:
        # Defined by Coordinator (coordinator.py).
        def _state_call(self, fn: Callable[[], _T]) -> _T: ...

        def _missing(self, rp: fsio.ResolvedPath) -> CoordinatorError: ...

        def _open_parent_or_missing(self, rp: fsio.ResolvedPath) -> int: ...

        # Defined by _RecordSteps (record.py).
        def _notice_extra(self, session: str, key: str) -> tuple[Extra | None, Callable[[list[Any]], str]]: ...

        # Defined by _InterveningSteps (intervening.py).
        def _intervening(
            self, key: str, recorded: ReadState, session: str, before_version: int | None = None
        ) -> _Intervening: ...
