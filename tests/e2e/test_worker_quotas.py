"""Worker-call quotas through a real daphne: a tenant at its limit is refused, the others are not.

Each tenant's server binds an http tool with ``execution="worker"`` whose webhook (a real HTTP server in this
test process, ``/gate``) holds every call until the test opens the gate of its ``key`` argument, so the test
knows exactly which calls are running. Tenant A may run 2 worker calls at once: with two held, its third is
refused with -32010 on HTTP 200 (never reaching the webhook) in both eras while tenant B's call runs; the
daphne's own admin page shows 2 of 2 running; once one of A's calls finishes, A's next call is admitted.

Runs on the embedded default (the daphne counts in its memory) and, with ``REDIS_URL``, on Redis (and then
this process reads the same counts).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings

from mcp_app.models import Tenant, Tool, ToolTask, Webhook
from mcp_app.protocol.errors import WORKER_QUOTA_EXCEEDED
from tests.conftest import Access
from tests.helpers import admin_session, endpoint
from tests.helpers import post_headers as headers
from tests.webhook_server import WebhookServer, running_server

from .conftest import Daphne, running_daphne

pytestmark = pytest.mark.e2e

WAIT = 10.0
MODERN = "2026-07-28"
LEGACY = "2025-06-18"
SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


@pytest.fixture(scope="module")
def quota_daphne(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    """A daphne whose http tools may reach this test's webhook on 127.0.0.1; with ``REDIS_URL``, a real Celery
    worker of its own (same allow-list) runs the calls, else the daphne runs them in its process."""
    from django.conf import settings as django_settings

    allow = {"MCP_HTTP_TOOL_ALLOWED_NETWORKS": "127.0.0.1"}
    with contextlib.ExitStack() as stack:
        if django_settings.REDIS_URL:
            from .workers import running_worker

            queue = f"quota-tests-{os.getpid()}"
            stack.enter_context(
                running_worker(tmp_path_factory, pool="threads", concurrency=8, queue=queue, extra_env=allow)
            )
            allow = {**allow, "MCP_WORKER_QUEUE": queue}
        yield stack.enter_context(running_daphne(tmp_path_factory, allow))


@pytest.fixture
def gate() -> Iterator[WebhookServer]:
    with running_server() as server:
        yield server


@pytest.fixture
def two_tenants(
    transactional_db: None,
    access_factory: Callable[..., Access],
    tool_factory: Any,
    gate: WebhookServer,
    settings: Any,
) -> tuple[Access, Access]:
    """Tenant A (at most 2 concurrent worker calls) and tenant B (the default), each with the gated worker tool."""
    settings.MCP_APP = {**settings.MCP_APP, "HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}  # to save the webhook

    def make(limit: int | None) -> Access:
        access = access_factory(tools=())
        tool = tool_factory(
            access.server, "gated", kind=Tool.Kind.HTTP, input_schema=SCHEMA, binding={"execution": "worker"}
        )
        Webhook.objects.create(tool=tool, url=gate.url("/gate"))
        tenant = Tenant.objects.get(pk=access.tenant.pk)
        tenant.max_worker_calls = limit
        tenant.save()
        return access

    return make(2), make(None)


@pytest.fixture
def operator(transactional_db: None) -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("quota-operator", "operator@example.test", "a-long-test-password")
    return "quota-operator", "a-long-test-password"


def message_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC response, from a JSON body or the last message of an SSE body."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ") and line[6:].strip()]
        return dict(orjson.loads(data[-1]))
    return dict(response.json())


async def call_gated(http: httpx.AsyncClient, base: str, access: Access, key: str, era: str = MODERN) -> httpx.Response:
    params: dict[str, Any] = {"name": "gated", "arguments": {"key": key}}
    extra = {"MCP-Protocol-Version": era}
    if era == MODERN:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
        }
        extra.update({"Mcp-Method": "tools/call", "Mcp-Name": "gated"})
    body = {"jsonrpc": "2.0", "id": key, "method": "tools/call", "params": params}
    return await http.post(endpoint(base, access), json=body, headers=headers(access, **extra))


def text_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    message = message_of(response)
    assert "error" not in message, message
    return str(message["result"]["content"][0]["text"])


def quota_refusal(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    message = message_of(response)
    assert "result" not in message, message
    assert message["error"]["code"] == WORKER_QUOTA_EXCEEDED == -32010, message
    return dict(message["error"])


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


async def test_a_tenant_at_its_worker_quota_is_refused_while_another_tenant_runs(
    quota_daphne: Daphne, two_tenants: tuple[Access, Access], gate: WebhookServer, operator: tuple[str, str]
) -> None:
    a, b = two_tenants
    base = quota_daphne.url
    async with httpx.AsyncClient(timeout=WAIT) as http, httpx.AsyncClient(timeout=WAIT) as admin:
        first = asyncio.create_task(call_gated(http, base, a, "a1"))
        second = asyncio.create_task(call_gated(http, base, a, "a2"))
        await until(lambda: sorted(gate.gated_keys()) == ["a1", "a2"], "both of A's calls run")

        # A's third call, in both eras: refused at the tenant's limit, and it never reaches the tool.
        modern = quota_refusal(await call_gated(http, base, a, "a3"))
        assert modern["data"] == {"scope": "tenant", "limit": 2}
        assert "this tenant may run at most 2 at once" in modern["message"]
        legacy = quota_refusal(await call_gated(http, base, a, "a3-legacy", era=LEGACY))
        assert legacy["data"] == {"scope": "tenant", "limit": 2}
        assert sorted(gate.gated_keys()) == ["a1", "a2"]
        # A refused call leaves no record behind: it is refused before anything is recorded.
        assert not await sync_to_async(ToolTask.objects.filter(arguments__key__startswith="a3").exists)()

        # Tenant B is not affected.
        gate.gate("b1").set()
        assert text_of(await call_gated(http, base, b, "b1")) == "b1 passed"

        # The operator sees A's two running calls on the serving process's admin.
        await admin_session(admin, base, operator)
        page = (await admin.get(f"{base}/admin/mcp_app/tenant/{a.tenant.pk}/change/")).text
        assert "2 of 2" in re.sub(r"<[^>]+>|\s+", " ", page).replace("  ", " ")
        if django_settings.REDIS_URL:  # shared counts: this process reads what the daphne holds
            from mcp_app.limits import quotas

            tenants, _agents = await asyncio.to_thread(quotas.running_calls, tenants=[a.tenant.pk, b.tenant.pk])
            assert tenants == {a.tenant.pk: 2, b.tenant.pk: 0}

        # One of A's calls finishes: the next is admitted.
        gate.gate("a1").set()
        assert text_of(await first) == "a1 passed"
        gate.gate("a4").set()
        assert text_of(await call_gated(http, base, a, "a4")) == "a4 passed"

        gate.gate("a2").set()
        assert text_of(await second) == "a2 passed"
    assert gate.gated_keys().count("a3") == 0 and "a3-legacy" not in gate.gated_keys()
