"""`LocalClient`: the `Client` in this process, its `run(op)` the declaration's `apply` on the engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, cast

from coordinator import arguments
from coordinator.client.base import BoundSession, Client
from coordinator.client.operations import Engine, Operation
from coordinator.engine import CallOptions, Coordinator
from coordinator.engine.options import Match, Policy
from coordinator.state.events import ChangeEvent

T = TypeVar("T")


class LocalClient(Client):
    """Calls the engine directly. `owns`: close the coordinator with the client. `policy`: the sessions'
    policy ("strict" or "rebase"; None: the coordinator's). `match`: how their edits find old_string
    ("exact" or "flexible"; None: the coordinator's). Both are checked here, so a bad value is refused when
    the client is made rather than at its first edit."""

    def __init__(
        self, coord: Coordinator, owns: bool = False, policy: str | None = None, match: str | None = None
    ) -> None:
        self.coord = coord
        self._owns = owns
        chosen_policy = None if policy is None else cast(Policy, arguments.check_policy(policy))
        chosen_match = None if match is None else cast(Match, arguments.check_match(match))
        self.engine = Engine(coord, chosen_policy, chosen_match)  # what the declarations run against

    @property
    def policy(self) -> Policy | None:
        return self.engine.policy

    @property
    def match(self) -> Match | None:
        return self.engine.match

    @property
    def matching(self) -> Match:
        """The matching its edits use: its own `match`, else the coordinator's."""
        return self.engine.match or self.coord.match

    @property
    def options(self) -> CallOptions:
        """How its sessions' engine calls are shaped (`with_options`)."""
        return self.engine.options

    def with_options(self, options: CallOptions) -> LocalClient:
        """This client, its sessions' engine calls shaped by `options` (engine/calls.py: LockBusy instead of
        waiting for a taken lock); the copy never closes the coordinator."""
        twin = LocalClient(self.coord)
        twin.engine = dataclasses.replace(self.engine, options=options)
        return twin

    def run(self, op: Operation[T]) -> T:
        """Run one declared operation (coordinator/client/operations.py) as the session it names."""
        return op.apply(self.engine, getattr(op, "session", None))

    @classmethod
    def open(cls, root: str, redis_url: str | None = None, **options: Any) -> LocalClient:
        """A client over a new `Coordinator(root, redis_url, **options)` (`policy=`, `match=`, `durability=`,
        ...: the coordinator's defaults, which its sessions take), closed with the client."""
        return cls(Coordinator(root, redis_url, **options), owns=True)

    def session(self, session_id: str) -> BoundSession:
        self.coord.session(session_id)  # validates the id
        return super().session(session_id)

    def announce(self, session: str) -> None:
        """Put `session` in the session registry now, before its first call (so `status` lists an MCP
        server's session from its start). Over HTTP the first call does this."""
        self.coord.register(self.engine.session(session).id)

    @property
    def default_read_lines(self) -> int:
        """How many lines a read without `limit` returns (the coordinator's setting)."""
        return self.coord.default_read_lines

    def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, timeout_s: float | None = None
    ) -> Iterator[ChangeEvent]:
        return self.coord.events(since=since, paths=paths, timeout_s=timeout_s)

    def close(self) -> None:
        if self._owns:
            self.coord.close()
