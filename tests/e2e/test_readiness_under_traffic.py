"""``/readyz`` polled the way a Kubernetes readiness probe does (every second, a short timeout) while worker calls
run on a real Celery worker, and after 100 of them: it stays 200, its channel layer check ``ok``.

A worker call subscribes this daphne to the channel layer for as long as it runs (the awaiting process hears the
worker's progress and outcome there), and that subscription's receive holds channels-redis's per-process receive
lock. The probe used to send to a process-specific channel of its own name (``new_channel("readyz.")``), which
only the lock holder could read, and the lock holder reads a different key: after the first worker call every
probe timed out and the pod was pulled for good (issue 24 #9). The liveness probe (``/healthz``) is polled too.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.conftest import Access
from tests.e2e.conftest import running_daphne
from tests.e2e.probes import Prober, failed
from tests.e2e.workers import WAIT, modern_tool_call, quiesce, require_broker, running_worker
from tests.helpers import endpoint, post_headers

pytestmark = pytest.mark.e2e

CALLS = 100
CONCURRENCY = 10


@pytest.fixture
def countdown_access(transactional_db: None, access_factory: Callable[..., Access]) -> Iterator[Access]:
    """A server with the demo's ``countdown``, a worker tool."""
    yield access_factory(tools=("countdown", "echo"))
    quiesce()


async def test_readyz_stays_ready_while_worker_calls_run_and_after_100_of_them(
    countdown_access: Access, tmp_path_factory: pytest.TempPathFactory
) -> None:
    require_broker()
    queue = f"ready-{uuid.uuid4().hex[:8]}"
    env = {"MCP_WORKER_QUEUE": queue}
    access = countdown_access
    url = endpoint("", access)
    with (
        running_daphne(tmp_path_factory, extra_env=env) as server,
        running_worker(tmp_path_factory, pool="threads", concurrency=CONCURRENCY, queue=queue, extra_env=env),
    ):

        async def countdown(http: httpx.AsyncClient, index: int, steps: int, interval_ms: int) -> int:
            body, extra = modern_tool_call("countdown", {"steps": steps, "interval_ms": interval_ms}, id=index)
            reply = await http.post(f"{server.url}{url}", json=body, headers={**post_headers(access), **extra})
            return reply.status_code

        with Prober(server.url) as during:
            async with httpx.AsyncClient(timeout=WAIT) as http:
                # One long call: probed several times while its subscription is open.
                long_call = await countdown(http, 0, 4, 1000)
                gate = asyncio.Semaphore(CONCURRENCY)

                async def bounded(index: int) -> int:
                    async with gate:
                        return await countdown(http, index, 1, 0)

                statuses = await asyncio.gather(*(bounded(index) for index in range(1, CALLS + 1)))
            during_answers = await during.stop()
        with Prober(server.url) as after:
            after_answers = await after.stop(after=3)  # three probes after the traffic

    assert long_call == 200
    assert statuses == [200] * CALLS
    readyz_during = [answer for answer in during_answers if answer[0] == "/readyz"]
    assert len(readyz_during) >= 5, during_answers  # the long call alone lasts 4 s
    assert failed(during_answers) == [], failed(during_answers)[:3]
    assert len([answer for answer in after_answers if answer[0] == "/readyz"]) >= 3, after_answers
    assert failed(after_answers) == [], failed(after_answers)[:3]
    for path, _status, body in during_answers + after_answers:
        if path == "/readyz":
            assert body["checks"]["channel_layer"]["status"] == "ok", body
            assert body["checks"]["workers"]["status"] == "ok", body
