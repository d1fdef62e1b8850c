"""Upstream tools bound with ``execution="worker"``: the proxied call runs on a real Celery worker.

The worker opens its own pooled connection to the upstream; progress crosses back to the daphne that holds the
client's stream, and a client's cancellation reaches the worker, which cancels the upstream request, which
stops the upstream tool. The upstream is mcp-host itself (tenant A's handshake-era server). A stateless
client's answer to the upstream's elicitation reaches the worker whose upstream call waits for it, from another
daphne and another worker (``second_worker_daphne`` dispatches to ``second_worker``'s queue).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import orjson
import pytest
from asgiref.sync import sync_to_async

from tests.conftest import Access
from tests.e2e.conftest import Daphne, running_daphne
from tests.e2e.federation.conftest import (
    LOOPBACK,
    WAIT_SECONDS,
    answer_on_another_daphne,
    bearer,
    sdk,
    stateless,
    texts,
    upstream_url,
)
from tests.e2e.workers import running_worker
from tests.helpers import needs_shared_layer, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.services]

QUEUE = f"tests-federation-{os.getpid()}"
SECOND_QUEUE = f"{QUEUE}-second"
ALLOW = {"MCP_OUTBOUND_ALLOWED_NETWORKS": LOOPBACK}


def worker_behind_daphne(worker_name: str, daphne_name: str, queue: str, concurrency: int) -> tuple[Any, Any]:
    """Two module fixtures: a Celery worker consuming only ``queue``, and a daphne whose worker calls go there."""

    @pytest.fixture(scope="module", name=worker_name)
    def worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        with running_worker(
            tmp_path_factory, pool="threads", concurrency=concurrency, queue=queue, extra_env=ALLOW
        ) as process:
            yield process

    @pytest.fixture(scope="module", name=daphne_name)
    def daphne(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
        request.getfixturevalue(worker_name)
        with running_daphne(tmp_path_factory, {**ALLOW, "MCP_WORKER_QUEUE": queue}) as server:
            yield server

    return worker, daphne


federation_worker, worker_daphne = worker_behind_daphne("federation_worker", "worker_daphne", QUEUE, 4)
# Another daphne, whose worker calls run on ``second_worker`` (another process than ``federation_worker``).
second_worker, second_worker_daphne = worker_behind_daphne("second_worker", "second_worker_daphne", SECOND_QUEUE, 2)


@pytest.fixture
def federated_on_worker(
    worker_daphne: Daphne,
    mcp_host_upstream: Access,
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],
) -> Access:
    from mcp_app.models import ServerTool

    access = access_factory(tools=())
    federate(access, upstream_url(worker_daphne, mcp_host_upstream), secret=bearer(mcp_host_upstream))
    ServerTool.objects.filter(server=access.server).update(execution="worker")
    from mcp_app.models import McpServer

    McpServer.objects.bump_catalog_version({access.server.pk}, ("tools",))
    return access


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_worker_runs_the_proxied_call_and_relays_its_progress(
    worker_daphne: Daphne, federated_on_worker: Access, mode: str, tmp_path: Path
) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    trace = tmp_path / "trace"
    async with asyncio.timeout(WAIT_SECONDS), sdk(worker_daphne.url, federated_on_worker, mode=mode) as client:
        result = await client.call_tool(
            "up_worker_job", {"path": str(trace), "tag": "w", "steps": 3}, progress_callback=on_progress
        )

    assert result.is_error is False
    assert updates == [1, 2, 3]
    assert result.meta is not None and result.meta["dev.mcp-host/upstream"]["upstream"] == "upstream"


async def test_a_cancelled_worker_call_stops_the_upstream_tool(
    worker_daphne: Daphne, federated_on_worker: Access, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    arguments = {"path": str(trace), "tag": "k", "steps": 200, "interval_ms": 50}

    def lines() -> list[str]:
        return trace.read_text().splitlines() if trace.exists() else []

    async with sdk(worker_daphne.url, federated_on_worker, mode="legacy") as client:
        call = asyncio.ensure_future(client.call_tool("up_worker_job", arguments))
        await wait_until(lambda: "k step 1" in lines(), timeout=WAIT_SECONDS, what="the upstream tool's first step")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until(lambda: "k stopped" in lines(), timeout=WAIT_SECONDS, what="the upstream tool to stop")

    assert "k finished" not in lines()


async def test_the_worker_logs_no_upstream_url(
    worker_daphne: Daphne, federated_on_worker: Access, federation_worker: Any, tmp_path: Path
) -> None:
    """A URL may carry a key in its query: the worker's HTTP client does not log the requests it sends."""
    async with asyncio.timeout(WAIT_SECONDS), sdk(worker_daphne.url, federated_on_worker, mode="legacy") as client:
        result = await client.call_tool("up_worker_job", {"path": str(tmp_path / "t"), "tag": "l", "steps": 1})

    assert result.is_error is False
    assert "worker call" in federation_worker.log()  # the worker's own line about the call is there
    assert "agentId=" not in federation_worker.log()


@pytest.mark.parametrize("retry_on", ["another worker", "the same worker"])
async def test_a_stateless_retry_reaches_the_worker_whose_upstream_call_waits(
    worker_daphne: Daphne, second_worker_daphne: Daphne, federated_on_worker: Access, retry_on: str
) -> None:
    """The handshake-era upstream asks for a name; the stateless client answers through another daphne, whose
    worker call runs on another worker process, or through the same daphne (on the same worker, in whichever of
    its threads): the answer reaches the first worker's waiting upstream call."""
    needs_shared_layer()
    retry_daphne = second_worker_daphne if retry_on == "another worker" else worker_daphne
    result = await answer_on_another_daphne(worker_daphne.url, retry_daphne.url, federated_on_worker)

    assert result.is_error is not True, result
    assert texts(result) == ["Hello, Grace!"]


async def test_a_worker_exchange_the_client_never_resumes_ends_at_its_timeout(
    worker_daphne: Daphne,
    second_worker_daphne: Daphne,
    federated_on_worker: Access,
    mcp_host_upstream: Access,
) -> None:
    """Nothing is left waiting on the worker: at the call's timeout the upstream request is cancelled (the
    upstream's own audit says so), and a late retry, on another worker, is told at once that it is gone."""
    from mcp_app.models import McpServer, ToolCall, Upstream

    needs_shared_layer()
    timeout = 2.0
    await sync_to_async(Upstream.objects.filter(tenant=federated_on_worker.tenant).update)(timeout_seconds=timeout)
    await sync_to_async(McpServer.objects.bump_catalog_version)({federated_on_worker.server.pk}, ("tools",))

    @sync_to_async
    def upstream_cancelled() -> bool:
        statuses = ToolCall.objects.filter(server=mcp_host_upstream.server, tool_name="ask_name")
        return list(statuses.values_list("status", flat=True)) == [ToolCall.Status.CANCELLED]

    async with asyncio.timeout(WAIT_SECONDS):
        async with stateless(worker_daphne.url, federated_on_worker) as one:
            first = await one.session.call_tool("up_ask_name", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        await wait_until(
            upstream_cancelled,
            timeout=timeout + 10,
            what="the upstream's ask_name call to be cancelled",
        )
        [key] = (first.input_requests or {}).keys()
        answer = types.ElicitResult(action="accept", content={"name": "Late"})
        async with stateless(second_worker_daphne.url, federated_on_worker) as two:
            late = await two.session.call_tool(
                "up_ask_name", {}, input_responses={key: answer}, request_state=first.request_state
            )

    assert late.is_error is True
    detail = orjson.loads(late.content[1].text)  # type: ignore[union-attr]
    assert detail["code"] == "UPSTREAM_EXCHANGE_GONE"
