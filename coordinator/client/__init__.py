"""The `Client` interface and its transports: `LocalClient` (in-process) and `HttpClient` (remote)."""

from .base import BoundSession, Client, EventPage, SessionStatus
from .http import HttpClient
from .local import LocalClient

InProcessClient = LocalClient

__all__ = ["BoundSession", "Client", "EventPage", "HttpClient", "InProcessClient", "LocalClient", "SessionStatus"]
