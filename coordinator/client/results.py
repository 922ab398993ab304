"""The result types of the client's own operations (the engine's are in coordinator/engine/results.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.state.events import ChangeEvent
from coordinator.state.leases import Lease


@dataclass(frozen=True)
class SessionStatus:
    """What the coordinator knows about one session."""

    session: str
    last_seen: float | None  # unix time of its last recorded read or write; None if not registered
    leases: tuple[Lease, ...] = ()  # its live leases

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "last_seen": self.last_seen, "leases": [x.to_dict() for x in self.leases]}


@dataclass(frozen=True)
class EventPage:
    """Change events after a cursor. Pass `cursor` as `since` to the next call to continue without a gap."""

    events: tuple[ChangeEvent, ...]
    cursor: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"events": [e.to_dict() for e in self.events], "cursor": self.cursor}
