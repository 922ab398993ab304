"""`refused`: the one helper for "this call is refused with that code" (shared by the test modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coordinator import CoordinatorError, ErrorCode


def refused(code: ErrorCode, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CoordinatorError:
    """Call `fn`, expect a CoordinatorError with `code` and a message (every refusal tells the agent
    something), and return it for further checks."""
    with pytest.raises(CoordinatorError) as info:
        fn(*args, **kwargs)
    assert info.value.code is code, info.value
    assert info.value.message
    return info.value
