"""Option types and size units of the engine."""

from __future__ import annotations

from typing import Literal

KiB = 1024
MiB = 1024 * KiB

Durability = Literal["fsync", "none"]
StateCheck = Literal["always", "cached"]
Policy = Literal["strict", "rebase"]

__all__ = ["Durability", "KiB", "MiB", "Policy", "StateCheck"]
