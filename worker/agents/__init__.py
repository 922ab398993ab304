"""The real agent CLIs (Claude Code, Codex, Gemini CLI) as test subjects: pinned npm releases installed into a
cache folder (`install`), a scripted model server on loopback speaking each vendor's streaming API
(`modelserver`), and runners that start one agent in a scratch repository with the hooks `edit-coordinator
init` writes and report what happened (`runner`). docs/agents/real-agents.md says how to run and upgrade them."""
