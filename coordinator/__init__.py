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

from typing import TYPE_CHECKING, Any

from coordinator import tools
from coordinator.client import BoundSession, Client, EventPage, InProcessClient, LocalClient, SessionStatus
from coordinator.client.aio import AsyncClient, AsyncSession
from coordinator.engine import Coordinator, EditResult, ReadResult, Session, WriteResult
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import HistoryEntry
from coordinator.version import __version__ as __version__

if TYPE_CHECKING:
    from coordinator.client.http import HttpClient

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
    "InProcessClient",
    "LocalClient",
    "ReadResult",
    "Session",
    "SessionStatus",
    "WriteResult",
    "tools",
]


def __getattr__(name: str) -> Any:
    """`HttpClient` on first use (see coordinator.client): an in-process program never loads httpx."""
    if name == "HttpClient":
        from coordinator.client.http import HttpClient

        return HttpClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
