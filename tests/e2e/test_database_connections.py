"""A burst of API and MCP requests at concurrency 50 against a real daphne on PostgreSQL holds at most the pool's
size of connections (``MCP_DATABASE_POOL_SIZE``), during and after, with no 500 and probes ready throughout.

The daphne under test names its connections (``application_name`` in its ``DATABASE_URL``), so
``pg_stat_activity`` counts exactly its own; a reader samples it all through the burst. Before the pool each
thread held a persistent connection of its own (channels' database thread, one thread per API request from
Django's ASGI handler, the default executor), and those outlived their threads: one daphne held 42 idle
connections after a burst at concurrency 8, still held past the 60 s age limit, and a server with
``max_connections`` 100 answered "too many clients" (issue 24 #10).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import REQUIRE_SERVICES, Access
from tests.e2e.conftest import database_url, running_daphne
from tests.e2e.probes import Prober, database_connections, failed
from tests.helpers import endpoint, initialize, post_headers

pytestmark = pytest.mark.e2e

POOL_SIZE = 5
CONCURRENCY = 50
ROUNDS = 4  # per client: an API list, an initialize (a session row), a tool call, each ROUNDS times
WAIT = 120.0  # the whole burst's bound on a loaded 2-core machine


@pytest.fixture
def burst_world(
    transactional_db: None, access_factory: Callable[..., Access], member_factory: Callable[..., Any]
) -> tuple[Access, str]:
    from django.db import connection

    from mcp_app.models import ApiKey

    if connection.vendor != "postgresql":
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but the test database is not PostgreSQL")
        pytest.skip("counting connections needs PostgreSQL (DATABASE_URL)")
    operator = member_factory(username="operator", password="x-unused-1", is_superuser=True)
    _key, raw = ApiKey.objects.issue_key(operator, name="burst")
    return access_factory(), raw


async def test_a_burst_at_concurrency_50_holds_at_most_the_pool_and_answers_no_500(
    burst_world: tuple[Access, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from django.db import connection

    access, api_key = burst_world
    name = f"burst-{uuid.uuid4().hex[:8]}"
    env = {
        "DATABASE_URL": f"{database_url(connection.settings_dict)}?application_name={name}",
        "MCP_DATABASE_POOL_SIZE": str(POOL_SIZE),
    }
    with running_daphne(tmp_path_factory, extra_env=env) as server:
        url = endpoint(server.url, access)
        api = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        }
        statuses: list[tuple[str, int]] = []
        samples: list[int] = []
        done = asyncio.Event()

        async def client(http: httpx.AsyncClient) -> None:
            for _ in range(ROUNDS):
                reply = await http.get(f"{server.url}/api/v1/servers/", headers=api)
                statuses.append(("api", reply.status_code))
                reply = await http.post(url, json=initialize({}), headers=post_headers(access))
                statuses.append(("initialize", reply.status_code))
                session = {
                    "Mcp-Session-Id": reply.headers.get("mcp-session-id", ""),
                    "MCP-Protocol-Version": "2025-11-25",
                }
                reply = await http.post(url, json=call, headers=post_headers(access, **session))
                statuses.append(("call", reply.status_code))

        async def sample() -> None:
            while not done.is_set():
                samples.append(await asyncio.to_thread(database_connections, name))
                await asyncio.sleep(0.05)  # the sampling rate, not a wait for an outcome

        limits = httpx.Limits(max_connections=CONCURRENCY)
        with Prober(server.url) as during:
            async with httpx.AsyncClient(timeout=WAIT, limits=limits) as http:
                sampler = asyncio.ensure_future(sample())
                async with asyncio.timeout(WAIT):
                    await asyncio.gather(*(client(http) for _ in range(CONCURRENCY)))
                done.set()
                await sampler
            during_answers = await during.stop(after=1)
        with Prober(server.url) as after:
            after_answers = await after.stop(after=3)
        held_after = await asyncio.to_thread(database_connections, name)

    assert len(statuses) == CONCURRENCY * ROUNDS * 3
    assert [entry for entry in statuses if entry[1] != 200] == [], sorted(set(statuses))
    assert samples and max(samples) <= POOL_SIZE, (max(samples), samples[-20:])
    assert held_after <= POOL_SIZE, held_after
    assert failed(during_answers) == [] and failed(after_answers) == [], failed(during_answers + after_answers)[:3]
