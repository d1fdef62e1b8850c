"""One lifecycle for every durable call: 2026 tasks, 2025-11-25 tasks and worker calls.

All three are rows of ``ToolTask`` (``models/tasks.py``), moved only by conditional UPDATEs. What they share is
written here once: how an outcome becomes columns and back (``outcomes``), and the life of the work in the
serving process: the register of running work, follow/settle/announce, the cancel listener, the one
``cancel(record)`` and ``stop(record)`` (``lifecycle``), the one wait for a record to settle (``waiting``), and
orphan recovery (``recovery``). The services of the two task eras
(``runtime/tasks.py``, ``runtime/handshake_tasks.py``) and the worker runner (``workers/serving/runner.py``) are
adapters over it: they decide what a call is and how the client sees it, not how it lives.
"""

from .lifecycle import Cancel, StatusChanged, cancel, cancel_now, drain, follow, keep, running, stop, stop_with
from .outcomes import columns, outcome_of, settled, strip_internal, terminal
from .recovery import recover_orphaned_tasks
from .waiting import reload, until_settled

__all__ = [
    "Cancel",
    "StatusChanged",
    "cancel",
    "cancel_now",
    "columns",
    "drain",
    "follow",
    "keep",
    "outcome_of",
    "recover_orphaned_tasks",
    "reload",
    "running",
    "settled",
    "stop",
    "stop_with",
    "strip_internal",
    "terminal",
    "until_settled",
]
