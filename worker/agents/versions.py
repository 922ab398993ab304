"""The agent releases the real-agent tests run: upgrading one is this one line and a test run
(`python3 -m pytest -m agents tests/worker/agents`, docs/agents/real-agents.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pinned:
    agent: str  # the name `edit-coordinator init` takes
    package: str  # the npm package
    version: str
    binary: str  # the command the package installs under node_modules/.bin

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    @property
    def folder(self) -> str:
        """The cache folder's name: the package's last name and the version (claude-code-2.1.328)."""
        return f"{self.package.rsplit('/', 1)[-1]}-{self.version}"


PINNED: dict[str, Pinned] = {
    "claude-code": Pinned("claude-code", "@anthropic-ai/claude-code", "2.1.328", "claude"),
    "codex": Pinned("codex", "@openai/codex", "0.169.0", "codex"),
    "gemini": Pinned("gemini", "@google/gemini-cli", "0.61.0", "gemini"),
}
