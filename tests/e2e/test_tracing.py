"""OpenTelemetry across processes: a client's trace, named in ``params._meta.traceparent``, continues in daphne and on
the Celery worker that runs the tool.

The test starts its own daphne and its own Celery worker (prefork with one pool process, or a thread pool, on a
queue of their own), both exporting with the real OTLP/HTTP exporter to a collector the test runs on 127.0.0.1
(``tests.otlp_collector``): tracing is switched on the way a deployment does it, by setting
``OTEL_EXPORTER_OTLP_ENDPOINT``. The worker's ``execute_tool`` span must carry the client's trace id and hang,
through the Celery task's spans, under daphne's MCP request span, which hangs under the client's span.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import Access
from tests.e2e.conftest import running_daphne
from tests.e2e.workers import WAIT, modern_tool_call, quiesce, require_broker, running_worker
from tests.helpers import endpoint
from tests.helpers import post_headers as headers
from tests.otlp_collector import Collector, Span, otlp_collector_fixture  # noqa: F401  (fixture)

pytestmark = pytest.mark.e2e

TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4737"
CLIENT_SPAN_ID = "10f067aa0ba902b8"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"


@pytest.fixture
def traced_access(transactional_db: None, access_factory: Any) -> Iterator[Access]:
    yield access_factory(tools=("worker_heap",))
    quiesce()


def ancestry(collector: Collector, span: Span) -> list[Span]:
    """``span`` and its parents as far as the collector has them, nearest first."""
    chain = [span]
    while chain[-1].parent_span_id and (parent := collector.by_id(chain[-1].parent_span_id)) is not None:
        chain.append(parent)
    return chain


@pytest.mark.parametrize("pool", ["prefork", "threads"])
async def test_the_worker_continues_the_trace_named_in_meta(
    pool: str, traced_access: Access, otlp_collector: Collector, tmp_path_factory: pytest.TempPathFactory
) -> None:
    require_broker()
    access = traced_access
    queue = f"traced-{uuid.uuid4().hex[:8]}"
    with (
        running_worker(
            tmp_path_factory,
            pool=pool,
            concurrency=1,
            queue=queue,
            extra_env={"MCP_WORKER_QUEUE": queue, **otlp_collector.environment("mcp-host-worker")},
        ) as worker,
        running_daphne(
            tmp_path_factory, extra_env={"MCP_WORKER_QUEUE": queue, **otlp_collector.environment("mcp-host-daphne")}
        ) as server,
    ):
        body, extra = modern_tool_call("worker_heap", {}, id=3, meta={"traceparent": TRACEPARENT})
        async with httpx.AsyncClient(timeout=WAIT) as http:
            reply = await http.post(
                endpoint(server.url, access),
                headers={**headers(access), **extra, "Accept": "application/json"},
                json=body,
            )
        assert reply.status_code == 200, reply.text
        result = orjson.loads(reply.content)["result"]["structuredContent"]
        # The worker ran it: a pool process (prefork), or the worker's own process (threads).
        assert result["pid"] != server.process.pid
        assert (result["pid"] != worker.process.pid) == (pool == "prefork")

        tool = otlp_collector.wait_for(
            lambda span: span.name == "execute_tool worker_heap", "the worker's tool span", timeout=WAIT
        )
        request = otlp_collector.wait_for(
            lambda span: span.name == "tools/call worker_heap", "daphne's request span", timeout=WAIT
        )
    assert tool.service == "mcp-host-worker" and request.service == "mcp-host-daphne"
    assert tool.trace_id == request.trace_id == TRACE_ID
    assert request.parent_span_id == CLIENT_SPAN_ID
    assert tool.attributes["mcp_host.tool.execution"] == "worker"
    assert tool.attributes["gen_ai.tool.name"] == "worker_heap"
    assert tool.attributes["mcp_host.tenant"] == access.tenant.slug
    assert request.attributes["mcp.method.name"] == "tools/call"
    assert request.attributes["mcp_host.era"] == "modern"
    # worker: execute_tool < run/… (the Celery task) ; daphne: apply_async/… < tools/call worker_heap
    chain = ancestry(otlp_collector, tool)
    assert [(span.service, span.name) for span in chain] == [
        ("mcp-host-worker", "execute_tool worker_heap"),
        ("mcp-host-worker", "run/mcp_app.run_tool_call"),
        ("mcp-host-daphne", "apply_async/mcp_app.run_tool_call"),
        ("mcp-host-daphne", "tools/call worker_heap"),
    ], worker.log()


async def test_an_in_process_worker_call_continues_the_trace_named_in_meta(
    traced_access: Access, otlp_collector: Collector, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The embedded default (no broker): the worker call runs in daphne, under the request's span. Django's own
    views are traced too."""
    access = traced_access
    environment = {"REDIS_URL": "", "MCP_INVALIDATION": "database", **otlp_collector.environment("mcp-host")}
    with running_daphne(tmp_path_factory, extra_env=environment) as server:
        body, extra = modern_tool_call("worker_heap", {}, id=4, meta={"traceparent": TRACEPARENT})
        async with httpx.AsyncClient(timeout=WAIT) as http:
            reply = await http.post(
                endpoint(server.url, access),
                headers={**headers(access), **extra, "Accept": "application/json"},
                json=body,
            )
        assert reply.status_code == 200, reply.text
        assert orjson.loads(reply.content)["result"]["structuredContent"]["pid"] == server.process.pid

        tool = otlp_collector.wait_for(
            lambda span: span.name == "execute_tool worker_heap", "the tool span", timeout=WAIT
        )
        otlp_collector.wait_for(lambda span: span.name == "tools/call worker_heap", "the request span", timeout=WAIT)
        # Django's own views (the admin, the API) are traced by the Django instrumentation.
        async with httpx.AsyncClient(timeout=WAIT) as http:
            assert (await http.get(f"{server.url}/admin/login/")).status_code == 200
        admin = otlp_collector.wait_for(lambda span: "admin/login" in span.name, "the admin's span", timeout=WAIT)
        assert admin.name.startswith("GET") and admin.kind == 2  # SPAN_KIND_SERVER
    assert tool.trace_id == TRACE_ID
    assert tool.attributes["mcp_host.tool.execution"] == "worker"
    chain = ancestry(otlp_collector, tool)
    assert [span.name for span in chain] == ["execute_tool worker_heap", "tools/call worker_heap"]
    assert chain[-1].parent_span_id == CLIENT_SPAN_ID
