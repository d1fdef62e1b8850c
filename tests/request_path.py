"""Counting what one request costs: SQL queries on every connection of every thread, and thread hops.

Django's ``CaptureQueriesContext`` sees only the current thread's connection, while the consumer's ORM work runs
in worker threads; so queries are counted where every connection executes them
(``CursorWrapper._execute_with_wrappers``), and hops where every ``sync_to_async`` and
``database_sync_to_async`` call goes through (``SyncToAsync.__call__``). The threads that write off the request
path on their own schedule (``BACKGROUND_WRITERS``: token and session stamps, the audit, budget counters and
alerts) are not counted: a flush of theirs may land while a call is measured, and is not that call's cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.db.backends.utils import CursorWrapper

BACKGROUND_WRITERS = frozenset({"mcp-write-behind", "mcp-audit-flusher", "mcp-budget-meter", "mcp-alerts"})


@dataclass
class Cost:
    queries: list[str] = field(default_factory=list)
    hops: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self._lock:
            self.queries.clear()
            self.hops.clear()


@contextlib.contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cost]:
    cost = Cost()
    execute = CursorWrapper._execute_with_wrappers
    hop = SyncToAsync.__call__

    def counted_execute(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name not in BACKGROUND_WRITERS:
            with cost._lock:
                cost.queries.append(sql)
        return execute(self, sql, *args, **kwargs)

    async def counted_hop(self: Any, *args: Any, **kwargs: Any) -> Any:
        function = getattr(self, "func", None)
        name = getattr(function, "__qualname__", None) or type(function).__name__
        with cost._lock:
            cost.hops.append(name)
        return await hop(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(CursorWrapper, "_execute_with_wrappers", counted_execute)
        patch.setattr(SyncToAsync, "__call__", counted_hop)
        yield cost


def wait_caches_ready(timeout: float = 5.0) -> None:
    """Wait (bounded) until this process follows the invalidation log, so that caches may fill."""
    from mcp_app import invalidation

    waiter = getattr(invalidation.get_backend(), "wait_healthy", None)
    if waiter is not None:
        assert waiter(timeout), "the invalidation log could not be followed"


async def caches_ready(timeout: float = 5.0) -> None:
    await asyncio.to_thread(wait_caches_ready, timeout)


async def assert_warm_call_is_free(monkeypatch: pytest.MonkeyPatch, access: Any, body: Any, headers: Any) -> None:
    """Once the caches follow the log, a first call fills them and its writes are flushed; the next, warm, call is
    answered 200 with no query and no thread hop."""
    from channels.db import database_sync_to_async

    from mcp_app.caching import writebehind
    from tests.helpers import call

    await caches_ready()
    assert (await call(access, body, headers=headers)).status == 200
    await database_sync_to_async(writebehind.flush)()
    with counting(monkeypatch) as cost:
        warm = await call(access, body, headers=headers)
    assert warm.status == 200, warm.body
    assert (cost.queries, cost.hops) == ([], [])
