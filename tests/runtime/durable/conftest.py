"""The durable lifecycle's tests: committed rows (its settlements run on other threads) and a record factory."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from mcp_app.models import ToolTask
from tests.helpers import close_connections_of_async_threads, own_channel_layer  # noqa: F401  (fixtures)


@pytest.fixture
def make_record(transactional_db: Any, access_factory: Callable[..., Any]) -> Callable[..., Awaitable[ToolTask]]:
    """An async factory of ``working`` task records of one agent on one server (``fields`` override)."""
    access = access_factory(tools=())

    def make(**fields: Any) -> ToolTask:
        state = {"status": "working", "client_task": True, "started_at": timezone.now(), **fields}
        return ToolTask.objects.create_task(
            tool_name="slow", arguments={}, ttl_ms=60_000, server=access.server, agent=access.agent, **state
        )

    return database_sync_to_async(make)
