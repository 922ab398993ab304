"""The `Client` interface and its transports: `LocalClient` (in-process) and `HttpClient` (remote).

Each operation is declared once, in `coordinator.client.operations` (its arguments, result, route, auth,
tool name and execution); every transport runs a declaration with `run(op)`.

`HttpClient` is loaded on first use (PEP 562): httpx and what it pulls in (about 15,000 objects, a third
of an in-process program's heap, which every full garbage collection walks) stay out of a program that
only edits in-process.
"""

from typing import TYPE_CHECKING, Any

from coordinator.client.base import BoundSession, Client, EventPage, SessionStatus
from coordinator.client.local import LocalClient

if TYPE_CHECKING:
    from coordinator.client.http import HttpClient

__all__ = ["BoundSession", "Client", "EventPage", "HttpClient", "LocalClient", "SessionStatus"]


def __getattr__(name: str) -> Any:
    if name == "HttpClient":
        from coordinator.client.http import HttpClient

        return HttpClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
