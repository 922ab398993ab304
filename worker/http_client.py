"""`worker.http_client.HttpClient`: moved to `coordinator.client.HttpClient` (this name keeps working)."""

from __future__ import annotations

from coordinator.client.http import HttpClient
from coordinator.client.transport import PlainHttpTransport, Reply

__all__ = ["HttpClient", "PlainHttpTransport", "Reply"]
