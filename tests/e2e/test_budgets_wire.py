"""A daily calls budget shared by two daphne processes (PostgreSQL or SQLite, and Redis): 50 concurrent calls
spread over both get exactly N answers and 50 - N refusals (429, -32013, ``Retry-After``), with no overshoot.

Without Redis each process counts its own calls, so this skips (and fails under ``MCP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from mcp_app.protocol.errors import BUDGET_EXCEEDED
from tests.conftest import Access
from tests.e2e.conftest import CALL
from tests.helpers import endpoint, needs_shared_layer
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

WAIT = 30.0
BUDGET = 7
CALLS = 50


@pytest.fixture
def shared_budget(settings: Any, live_access: Access) -> Access:
    """A daily budget of ``BUDGET`` calls on the tenant, its counters (keyed by primary keys, which a new test
    database reuses) cleared in the Redis both processes share."""
    import redis

    from mcp_app.limits.budgets import KEY_PREFIX
    from mcp_app.models import Budget

    needs_shared_layer()
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5.0)
    try:
        stale = list(client.scan_iter(f"{KEY_PREFIX}:t:{live_access.tenant.pk}:*"))
        if stale:
            client.delete(*stale)
    finally:
        client.close()
    Budget.objects.create(tenant=live_access.tenant, set_by="operator", calls_per_day=BUDGET)
    return live_access


async def test_two_processes_sharing_a_daily_budget_answer_exactly_n_of_50_concurrent_calls(
    daphne_url: str, second_daphne: Any, shared_budget: Access
) -> None:
    urls = [endpoint(daphne_url, shared_budget), endpoint(second_daphne.url, shared_budget)]
    async with httpx.AsyncClient(timeout=WAIT, limits=httpx.Limits(max_connections=CALLS)) as http:
        replies = await asyncio.gather(
            *(
                http.post(
                    urls[n % 2],
                    json={**CALL, "id": n},
                    headers=headers(shared_budget, **{"MCP-Protocol-Version": "2025-11-25"}),
                )
                for n in range(CALLS)
            )
        )
    served = [reply for reply in replies if reply.status_code == 200]
    refused = [reply for reply in replies if reply.status_code == 429]
    assert (len(served), len(refused)) == (BUDGET, CALLS - BUDGET), [reply.status_code for reply in replies]
    assert all(reply.json()["result"]["content"] == [{"type": "text", "text": "x"}] for reply in served)
    for reply in refused:
        error = reply.json()["error"]
        assert error["code"] == BUDGET_EXCEEDED
        assert error["data"]["budget"] == BUDGET and error["data"]["used"] == BUDGET
        assert (error["data"]["scope"], error["data"]["metric"], error["data"]["period"]) == ("tenant", "calls", "day")
        assert 1 <= int(reply.headers["retry-after"]) <= 24 * 3600
    assert {reply.url.port for reply in refused} == {httpx.URL(url).port for url in urls}
