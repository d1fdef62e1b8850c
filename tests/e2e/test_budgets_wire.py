"""Budgets shared by two daphne processes (PostgreSQL or SQLite, and Redis).

- A daily calls budget: 50 concurrent calls spread over both get exactly N answers and 50 - N refusals (429,
  -32013, ``Retry-After``), with no overshoot.
- A daily tool-seconds budget of worker calls (a real Celery worker measures them and adds them to the shared
  counters every ``BUDGET_FLUSH_INTERVAL_SECONDS``): calls are answered until the measured seconds reach it, then
  refused (``data.metric == "tool_seconds"``), within the documented overshoot (docs/budgets.md: the calls in
  flight plus one flush interval of calls), and the ledger holds at least the budget's seconds.

Without Redis each process counts its own calls (and there is no broker), so these skip (and fail under
``MCP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mcp_app.conf import mcp_settings
from mcp_app.models import UsageDay
from mcp_app.protocol.errors import BUDGET_EXCEEDED
from tests.conftest import Access
from tests.e2e.conftest import CALL
from tests.e2e.workers import modern_tool_call, orm, quiesce
from tests.helpers import budget_counters, endpoint, needs_shared_layer, wait_until
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

WAIT = 30.0
BUDGET = 7
CALLS = 50
SECONDS_BUDGET = 1.5  # a daily tool-seconds budget
CALL_SECONDS = 0.25  # what each worker call sleeps (worker_job: one step of interval_ms)
CLIENTS = 2  # each calls one after the other, on its own daphne
MOST_CALLS = 60  # a client that is never refused stops here (and the test fails)


@pytest.fixture
def shared_budget(settings: Any, live_access: Access) -> Access:
    """A daily budget of ``BUDGET`` calls on the tenant, its counters cleared."""
    from mcp_app.models import Budget

    needs_shared_layer()
    budget_counters(settings.REDIS_URL, live_access.tenant.pk, clear=True)
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


@pytest.fixture
def seconds_budget(settings: Any, transactional_db: None, access_factory: Any, celery_worker: Any) -> Iterator[Access]:
    """A worker tool on the session's Celery worker, and a daily budget of ``SECONDS_BUDGET`` tool-seconds on the
    tenant, its counters cleared."""
    from mcp_app.models import Budget

    needs_shared_layer()
    access = access_factory(tools=("worker_job",))
    budget_counters(settings.REDIS_URL, access.tenant.pk, clear=True)
    Budget.objects.create(tenant=access.tenant, set_by="operator", tool_seconds_per_day=SECONDS_BUDGET)
    yield access
    quiesce()


async def test_a_tool_seconds_budget_stops_worker_calls_once_their_measured_seconds_reach_it(
    daphne_url: str, second_daphne: Any, seconds_budget: Access
) -> None:
    access = seconds_budget
    arguments = {"steps": 1, "interval_ms": int(CALL_SECONDS * 1000)}
    refusals: list[httpx.Response] = []

    async def client(http: httpx.AsyncClient, url: str) -> int:
        """Call one after the other until refused; how many calls were answered."""
        for answered in range(MOST_CALLS):
            body, extra = modern_tool_call("worker_job", arguments, id=answered)
            reply = await http.post(url, headers={**headers(access), **extra, "Accept": "application/json"}, json=body)
            if reply.status_code == 429:
                refusals.append(reply)
                return answered
            assert reply.status_code == 200, reply.text
            assert reply.json()["result"]["structuredContent"]["done"] == 1
        return MOST_CALLS

    urls = [endpoint(daphne_url, access), endpoint(second_daphne.url, access)]
    async with httpx.AsyncClient(timeout=WAIT) as http:
        answered = sum(await asyncio.gather(*(client(http, url) for url in urls)))
    assert len(refusals) == CLIENTS, f"{answered} calls answered and never refused"
    for reply in refusals:
        error = reply.json()["error"]
        assert error["code"] == BUDGET_EXCEEDED
        data = error["data"]
        assert (data["scope"], data["metric"], data["period"]) == ("tenant", "tool_seconds", "day")
        assert data["budget"] == SECONDS_BUDGET and data["used"] >= SECONDS_BUDGET
        assert 1 <= int(reply.headers["retry-after"]) <= 24 * 3600

    def row() -> UsageDay | None:
        return UsageDay.objects.filter(tenant=access.tenant, tool_name="worker_job").first()

    async def all_written() -> UsageDay | None:
        found = await orm(row)
        return found if found is not None and found.calls >= answered else None

    # The worker's ledger rows (its audit flusher writes them within its interval): bounded polling.
    written = await wait_until(all_written, timeout=WAIT, what="the worker's usage in the ledger")
    assert (written.calls, written.errors) == (answered, 0)  # every answered call ran once; no refused one did
    assert written.tool_seconds >= SECONDS_BUDGET
    # Never refused before the measured seconds reached the budget; past it, at most the calls in flight (one per
    # client) and one flush interval of calls (per client), each of at least CALL_SECONDS.
    interval = float(mcp_settings.BUDGET_FLUSH_INTERVAL_SECONDS)
    most = math.ceil(SECONDS_BUDGET / CALL_SECONDS) + CLIENTS * (math.ceil(interval / CALL_SECONDS) + 1)
    assert answered <= most, (answered, written.tool_seconds)
