"""The PostgreSQL backend ``mcp_app.database`` on a real server: a database that refuses makes the process refuse
new connections at once for ``RETRY_AFTER_SECONDS``; a pool that is merely busy (every connection in use) does
not. Each test builds a backend of its own (its own small pool) next to the test database's.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError

from tests.conftest import REQUIRE_SERVICES


@pytest.fixture
def backend_settings(db: None) -> Iterator[dict[str, Any]]:
    from django.db import connection

    from mcp_app.database import database_health

    if connection.vendor != "postgresql":
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but the test database is not PostgreSQL")
        pytest.skip("the backend's pool needs PostgreSQL (DATABASE_URL)")
    options = dict(connection.settings_dict["OPTIONS"])
    options["pool"] = {**options["pool"], "min_size": 1, "max_size": 1, "timeout": 0.5}
    yield {**connection.settings_dict, "OPTIONS": options}
    database_health.succeeded()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refusing_database_makes_the_process_refuse_at_once(backend_settings: dict[str, Any]) -> None:
    from mcp_app.database import database_health
    from mcp_app.database.base import DatabaseWrapper

    down = DatabaseWrapper({**backend_settings, "HOST": "127.0.0.1", "PORT": _closed_port()}, alias="refused")
    try:
        with pytest.raises(OperationalError):
            down.ensure_connection()
        assert database_health.refusing()
        with pytest.raises(OperationalError, match="failed moments ago"):
            down.ensure_connection()
    finally:
        down.close_pool()


def test_a_busy_pool_is_not_a_failing_database(backend_settings: dict[str, Any]) -> None:
    from mcp_app.database import database_health
    from mcp_app.database.base import DatabaseWrapper

    holder = DatabaseWrapper(backend_settings, alias="busy")
    waiter = DatabaseWrapper(backend_settings, alias="busy")  # the same pool of one connection
    try:
        holder.ensure_connection()
        with pytest.raises(OperationalError, match="couldn't get a connection"):
            waiter.ensure_connection()
        assert not database_health.refusing()
        holder.close()  # back to the pool
        waiter.ensure_connection()
        assert waiter.is_usable()
    finally:
        waiter.close()
        holder.close_pool()
