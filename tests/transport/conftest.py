"""Transport tests run the real consumer against a real database; rows must be committed for its threads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async


@pytest.fixture
def access(transactional_db: Any, access_factory: Callable[..., Any]) -> Any:
    return access_factory()


@pytest.fixture
def make_access(transactional_db: Any, access_factory: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    return database_sync_to_async(access_factory)


@pytest.fixture
def orm() -> Callable[..., Awaitable[Any]]:
    """Run a sync callable (ORM work) from an async test."""

    async def run(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await database_sync_to_async(function)(*args, **kwargs)

    return run


@pytest.fixture(autouse=True, scope="session")
def _close_connections_of_async_threads(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """database_sync_to_async keeps a connection in its worker thread: close it before the test DB is dropped."""
    yield
    import asyncio

    from django.db import connections

    with django_db_blocker.unblock():
        asyncio.run(database_sync_to_async(connections.close_all)())


from tests.webhook_server import webhook_server  # noqa: E402, F401  (fixture: a real HTTP server on 127.0.0.1)


@pytest.fixture
async def worker_calls_drained() -> Any:
    """After the test, wait (bounded) for the in-process work of worker calls to end in this test's event loop:
    a receive on the channel layer left pending when the loop closes would break the next test's loop."""
    yield
    import asyncio

    from mcp_app.workers import runner

    for _ in range(3):
        pending = list(runner._local_work)
        if not pending:
            return
        await asyncio.wait(pending, timeout=5)
