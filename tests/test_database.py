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


def test_the_middleware_answers_only_database_errors_by_what_the_client_accepts(rf: Any) -> None:
    """A browser gets a page, a JSON client the RFC 6749 §5.2 shape; any other error stays Django's 500.
    (On the wire, against a real daphne and a refused database: ``tests/e2e/test_database_outage.py``.)"""
    from django.db import InterfaceError
    from django.http import HttpResponse

    from mcp_app.database.middleware import DatabaseUnavailableMiddleware

    middleware = DatabaseUnavailableMiddleware(lambda request: HttpResponse())
    browser = rf.get("/admin/", HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    page = middleware.process_exception(browser, OperationalError("connection refused"))
    assert page is not None and page.status_code == 503
    assert page["Content-Type"].startswith("text/html") and int(page["Retry-After"]) >= 1
    client = rf.get("/admin/", HTTP_ACCEPT="application/json")
    answer = middleware.process_exception(client, InterfaceError("connection already closed"))
    assert answer is not None and answer.status_code == 503 and int(answer["Retry-After"]) >= 1
    assert answer["Content-Type"] == "application/json"
    assert b'"error": "temporarily_unavailable"' in answer.content
    assert "Access-Control-Allow-Origin" not in answer  # only the authorization server's public endpoints
    assert middleware.process_exception(browser, RuntimeError("a bug")) is None
