"""Upstreams that fail: down, silent, not MCP, refused by the SSRF guard, failing often enough to trip the breaker.

The client always gets an ``isError`` result naming what happened (``{code, message, error_type:
"upstream_error"}`` in its second text block) within the entry's timeout: never a hang, never a 5xx. The calls
go through the real consumer in this process (``tests.helpers.call``) to real upstream processes and sockets.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from mcp_app.models import UsageDay
from mcp_app.runtime.audit import audit_log
from tests.conftest import Access
from tests.e2e.federation.conftest import failure
from tests.federation.upstream_server import UpstreamProcess
from tests.helpers import call, result_of, rpc

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_pool")]


def echo(text: str = "hi") -> dict[str, Any]:
    return rpc("tools/call", {"name": "up_echo", "arguments": {"text": text}})


async def test_a_down_upstream_answers_an_error_result_at_once(
    federated: tuple[Access, Any], private_upstream: UpstreamProcess
) -> None:
    access, _upstream = federated
    assert result_of(await call(access, echo()))["content"][0]["text"] == "hi"

    private_upstream.stop()
    started = time.monotonic()
    result = result_of(await call(access, echo(), timeout=10))

    assert failure(result) == "UPSTREAM_UNAVAILABLE"
    assert time.monotonic() - started < 5


async def test_upstream_calls_are_metered_like_the_rest_failures_included(
    federated: tuple[Access, Any], private_upstream: UpstreamProcess
) -> None:
    access, _upstream = federated
    assert result_of(await call(access, echo()))["content"][0]["text"] == "hi"
    private_upstream.stop()
    assert failure(result_of(await call(access, echo(), timeout=10))) == "UPSTREAM_UNAVAILABLE"

    def ledger_row() -> UsageDay:
        audit_log.flush()  # writes the usage ledger too
        return UsageDay.objects.get(tenant=access.tenant, tool_name="up_echo")

    row = await sync_to_async(ledger_row)()
    assert (row.calls, row.errors, row.server_key) == (2, 1, access.server.server_id)
    assert row.tool_seconds > 0 and row.bytes_out > 0


async def test_a_silent_upstream_answers_an_error_result_within_the_timeout(
    federated: tuple[Access, Any], silent_url: str
) -> None:
    access, upstream = federated

    def go_silent() -> None:
        upstream.url = silent_url
        upstream.timeout_seconds = 1
        upstream.save()

    await sync_to_async(go_silent)()
    started = time.monotonic()
    result = result_of(await call(access, echo(), timeout=10))

    assert failure(result) == "UPSTREAM_TIMEOUT"
    assert 1 <= time.monotonic() - started < 4


@pytest.fixture
def garbage_url() -> Iterator[str]:
    """An HTTP server that answers every request with a web page, not MCP."""

    class Page(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>not an MCP server</html>")

        do_GET = do_POST

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


async def test_an_upstream_that_is_not_mcp_answers_an_error_result(
    federated: tuple[Access, Any], garbage_url: str
) -> None:
    access, upstream = federated

    def point_elsewhere() -> None:
        upstream.url = garbage_url
        upstream.save()

    await sync_to_async(point_elsewhere)()
    result = result_of(await call(access, echo(), timeout=15))

    assert failure(result) in {"UPSTREAM_UNAVAILABLE", "UPSTREAM_INVALID_REPLY"}


async def test_the_breaker_opens_after_repeated_failures_and_closes_after_a_good_probe(
    federated: tuple[Access, Any], private_upstream: UpstreamProcess, settings: Any
) -> None:
    from mcp_app.federation import breaker

    settings.MCP_APP = {
        **settings.MCP_APP,
        "UPSTREAM_BREAKER_FAILURES": 2,
        "UPSTREAM_BREAKER_WINDOW_SECONDS": 30,
        "UPSTREAM_BREAKER_COOLDOWN_SECONDS": 1,
    }
    access, upstream = federated
    await sync_to_async(breaker.reset)(upstream.pk)
    private_upstream.stop()

    codes = [failure(result_of(await call(access, echo(), timeout=10))) for _ in range(3)]
    state = await sync_to_async(breaker.state)(upstream.pk)

    assert codes == ["UPSTREAM_UNAVAILABLE", "UPSTREAM_UNAVAILABLE", "UPSTREAM_CIRCUIT_OPEN"]
    assert state.status == "open"

    private_upstream.start()
    assert state.open_until is not None
    # The cool-down is a span of time the breaker itself measures: wait it out, then one call probes.
    await asyncio.sleep(max(0.0, state.open_until.timestamp() - time.time()) + 0.05)
    recovered = result_of(await call(access, echo("back"), timeout=10))

    assert recovered["content"][0]["text"] == "back"
    assert (await sync_to_async(breaker.state)(upstream.pk)).status == "closed"


def test_a_private_address_is_refused_at_registration_unless_allow_listed(
    settings: Any, tenant_factory: Callable[..., Any]
) -> None:
    from mcp_app.models import Upstream

    tenant = tenant_factory()
    for url in ("http://127.0.0.1:9/mcp", "http://10.1.2.3/mcp", "http://169.254.169.254/latest"):
        with pytest.raises(ValidationError) as refused:
            Upstream(tenant=tenant, name="private", url=url).full_clean()
        assert "may not call it" in str(refused.value.message_dict["url"])

    settings.MCP_APP = {**settings.MCP_APP, "OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}
    Upstream(tenant=tenant, name="allowed", url="http://127.0.0.1:9/mcp").full_clean()


async def test_a_host_name_of_a_private_address_is_refused_at_connection(
    federated: tuple[Access, Any], private_upstream: UpstreamProcess, settings: Any
) -> None:
    access, upstream = federated

    def by_name() -> None:
        upstream.url = private_upstream.url.replace("127.0.0.1", "localhost")
        upstream.save()  # a name, not an address: the guard decides when it resolves, at connection

    await sync_to_async(by_name)()
    settings.MCP_APP = {**settings.MCP_APP, "OUTBOUND_ALLOWED_NETWORKS": []}
    result = result_of(await call(access, echo(), timeout=10))

    assert failure(result) == "UPSTREAM_FORBIDDEN_ADDRESS"
    assert private_upstream.events() == []  # nothing reached it


def test_a_failed_sync_keeps_the_catalog_and_records_why(
    federated: tuple[Access, Any], private_upstream: UpstreamProcess
) -> None:
    from mcp_app.federation.sync import sync_upstream
    from mcp_app.models import ServerTool

    access, upstream = federated
    before = sorted(ServerTool.objects.filter(server=access.server).values_list("tool__name", flat=True))
    private_upstream.stop()

    report = sync_upstream(upstream)
    upstream.refresh_from_db()

    assert report.ok is False
    assert upstream.last_sync_error.startswith("Could not connect")
    assert sorted(ServerTool.objects.filter(server=access.server).values_list("tool__name", flat=True)) == before


def test_an_entry_the_upstream_dropped_disappears_from_every_server(
    federated: tuple[Access, Any], server_factory: Callable[..., Any]
) -> None:
    from mcp_app.federation.sync import RemoteCatalog, apply, bind
    from mcp_app.models import ServerTool, Tool

    access, upstream = federated
    other = server_factory(tenant=access.tenant)
    bind(upstream, other)
    remote = RemoteCatalog(
        protocol_version="2026-07-28",
        server_info=None,
        capabilities={"tools": {}},
        tools=[{"name": "echo", "inputSchema": {"type": "object"}}],
    )

    report = apply(upstream, remote)

    assert "up_add" in report.removed
    assert list(Tool.objects.filter(upstream=upstream).values_list("name", flat=True)) == ["up_echo"]
    for server in (access.server, other):
        assert list(ServerTool.objects.filter(server=server).values_list("tool__name", flat=True)) == ["up_echo"]


async def test_an_answer_larger_than_the_bound_is_an_error_result(federated: tuple[Access, Any], settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "UPSTREAM_MAX_RESPONSE_BYTES": 4096}
    access, _upstream = federated

    small = result_of(await call(access, echo("x" * 100), timeout=10))
    large = result_of(await call(access, echo("x" * 20_000), timeout=10))

    assert small["content"][0]["text"] == "x" * 100
    assert failure(large) == "UPSTREAM_TOO_LARGE"


async def test_upstream_exchanges_are_measured_by_outcome(
    federated: tuple[Access, Any], private_upstream: UpstreamProcess, settings: Any
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    token = "scrape-secret-for-tests"
    settings.MCP_APP = {**settings.MCP_APP, "METRICS_TOKEN": token}
    access, upstream = federated
    label = f"{access.tenant.slug}/{upstream.name}"

    async def count(outcome: str) -> float:
        reply = await call(
            access, method="GET", path="/metrics", query="", headers={"authorization": f"Bearer {token}"}
        )
        for family in text_string_to_metric_families(reply.body.decode()):
            for sample in family.samples:
                if sample.name == "mcp_upstream_call_duration_seconds_count" and sample.labels == {
                    "upstream": label,
                    "outcome": outcome,
                }:
                    return sample.value
        return 0.0

    ok, down = await count("ok"), await count("UPSTREAM_UNAVAILABLE")
    await call(access, echo(), timeout=10)
    private_upstream.stop()
    await call(access, echo(), timeout=10)

    assert (await count("ok") - ok, await count("UPSTREAM_UNAVAILABLE") - down) == (1, 1)
