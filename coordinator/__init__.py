"""edit-coordinator: Read / Write / Edit for many agent sessions on one repository, safely.

from coordinator import Coordinator, CoordinatorError, ErrorCode

with Coordinator(root) as coord:
    s = coord.session("agent-7")
    s.read("src/app.py")
    s.edit("src/app.py", "old", "new")
"""

from .engine import Coordinator, EditResult, ReadResult, Session, WriteResult
from .errors import CoordinatorError, ErrorCode
from .history import HistoryEntry

__all__ = [
    "Coordinator",
    "CoordinatorError",
    "EditResult",
    "ErrorCode",
    "HistoryEntry",
    "ReadResult",
    "Session",
    "WriteResult",
]

__version__ = "0.1.0"
