"""Option types and size units of the engine."""

from __future__ import annotations

from typing import Literal

KiB = 1024
MiB = 1024 * KiB

Durability = Literal["fsync", "none"]
StateCheck = Literal["always", "cached"]
Policy = Literal["strict", "rebase"]
Match = Literal["exact", "flexible"]
Placeholders = Literal["refuse", "allow"]

__all__ = ["Durability", "KiB", "Match", "MiB", "Placeholders", "Policy", "StateCheck"]
