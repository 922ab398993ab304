"""Git for a shared checkout: a commit of exactly one session's writes (commit.py), a guard against the git
commands that would sweep up or discard other sessions' uncommitted work (guard.py), line provenance
(blame.py) and the optional commit when a session ends (autocommit.py).

The history (coordinator/history) knows which session wrote every version of every file; this package reads
it through its public API and talks to git through its plumbing commands (plumbing.py): a private index, object
writes and a compare-and-swap of the branch ref, so the working tree and the shared index are never swept.
"""
