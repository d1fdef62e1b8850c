"""What a tool call spent, told once to everything that counts it (docs/budgets.md).

The runtime measures each call where its tool runs (the serving process for inline calls, the worker for worker
calls) and calls ``spent(Spent(...))`` once when the call ends, whatever its outcome: failed and cancelled calls
count their tool-seconds too. Counters register with ``on_spent``: the usage ledger and the budgets. A listener
must not block or raise (it buffers; its own flusher does the I/O); one that raises is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import NamedTuple

logger = logging.getLogger("mcp_app.limits.usage")


class Spent(NamedTuple):
    """One call's usage: who, what, which day (the tenant's), and how much. Immutable; a ``NamedTuple`` rather than
    a frozen dataclass because one is made per call (``tuple.__new__``, not one ``object.__setattr__`` per field)."""

    tenant_pk: int
    agent_pk: int | None
    server_pk: int | None
    agent_key: str
    server_key: str
    tool_name: str
    day: date
    errors: int  # 1 when the call failed (a JSON-RPC error, an ``isError`` result, a cancellation), else 0
    tool_seconds: float
    bytes_in: int
    bytes_out: int
    cost: Decimal
    calls: int = 1
    tenant_slug: str = ""  # for operators' eyes (the metrics' tenant label), not a key


_listeners: list[Callable[[Spent], None]] = []


def on_spent(listener: Callable[[Spent], None]) -> Callable[[Spent], None]:
    """Call ``listener`` with every ``Spent`` of this process (idempotent); returns it (usable as a decorator)."""
    if listener not in _listeners:
        _listeners.append(listener)
    return listener


def spent(usage: Spent) -> None:
    """Tell every listener what a call spent."""
    for listener in _listeners:
        try:
            listener(usage)
        except Exception:
            logger.exception("a usage listener failed; this call's usage is missing from it")
