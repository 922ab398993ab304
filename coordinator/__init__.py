"""edit-coordinator: Read / Write / Edit for many agent sessions on one repository, safely.

from coordinator import Coordinator, CoordinatorError, ErrorCode

with Coordinator(root) as coord:
    s = coord.session("agent-7")
    s.read("src/app.py")
    s.edit("src/app.py", "old", "new")

The same operations through the `Client` interface, in this process or remote:

from coordinator import HttpClient, LocalClient

client = HttpClient("http://127.0.0.1:8765", token=token)   # or LocalClient(coord)
client.edit("agent-7", "src/app.py", "old", "new")

For an event loop, `AsyncClient` (the same operations, awaitable); for model APIs, `coordinator.tools`
(tool definitions for Anthropic, OpenAI and MCP, and one dispatcher).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from coordinator.version import __version__ as __version__

if TYPE_CHECKING:
    from coordinator import tools
    from coordinator.client import BoundSession, Client, EventPage, LocalClient, SessionStatus
    from coordinator.client.aio import AsyncClient, AsyncSession
    from coordinator.client.http import HttpClient
    from coordinator.engine import Coordinator, EditResult, ReadResult, Session, WriteResult
    from coordinator.errors import CoordinatorError, ErrorCode
    from coordinator.history import HistoryEntry

# Each public name and the module it comes from, loaded on first use (PEP 562): `import coordinator` stays
# cheap for a program that needs one part (the command hook runs on every tool call of an agent), and an
# in-process program never loads httpx.
_LAZY = {
    "AsyncClient": "coordinator.client.aio",
    "AsyncSession": "coordinator.client.aio",
    "BoundSession": "coordinator.client",
    "Client": "coordinator.client",
    "Coordinator": "coordinator.engine",
    "CoordinatorError": "coordinator.errors",
    "EditResult": "coordinator.engine",
    "ErrorCode": "coordinator.errors",
    "EventPage": "coordinator.client",
    "HistoryEntry": "coordinator.history",
    "HttpClient": "coordinator.client.http",
    "LocalClient": "coordinator.client",
    "ReadResult": "coordinator.engine",
    "Session": "coordinator.engine",
    "SessionStatus": "coordinator.client",
    "WriteResult": "coordinator.engine",
}

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "BoundSession",
    "Client",
    "Coordinator",
    "CoordinatorError",
    "EditResult",
    "ErrorCode",
    "EventPage",
    "HistoryEntry",
    "HttpClient",
    "LocalClient",
    "ReadResult",
    "Session",
    "SessionStatus",
    "WriteResult",
    "tools",
]


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (and then kept in the module like any attribute)."""
    if name == "tools":
        value: Any = importlib.import_module("coordinator.tools")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
