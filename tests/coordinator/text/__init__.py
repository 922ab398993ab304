"""Unit tests of the pure core (semantics, rebase, textio, flexmatch, placeholders)."""

from __future__ import annotations

import os


def examples(n: int) -> int:
    """A property test's number of examples: `n`, or fewer when EDIT_COORDINATOR_PROPERTY_EXAMPLES caps it.

    The cap exists for mutation runs (docs/mutation.md), which run these tests once per mutant; the default
    test run never sets it.
    """
    cap = os.environ.get("EDIT_COORDINATOR_PROPERTY_EXAMPLES", "")
    return min(n, int(cap)) if cap.strip() else n
