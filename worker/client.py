"""The worker fleet's client interface: `coordinator.Client` and its in-process transport, under the names
the fleet has always imported (`worker.client.Client`, `worker.client.InProcessClient`)."""

from __future__ import annotations

from coordinator.client import Client, LocalClient

InProcessClient = LocalClient

__all__ = ["Client", "InProcessClient"]
