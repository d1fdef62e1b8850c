"""Federation end to end: a daphne that may reach loopback upstreams, and the pieces every test builds on.

``federating_daphne`` (and ``second_federating_daphne``) is a daphne of this module's own whose outbound allow-list admits 127.0.0.1 (the session's
daphne keeps the default, which refuses private addresses: the SSRF tests use it). ``mcp_host_upstream`` is
mcp-host itself as an upstream: a server of tenant A limited to the handshake era (so the SDK client of the
federating daphne falls back from ``server/discover`` to ``initialize``), exposing test tools that elicit,
report progress, log and leave a trace of their cancellation. ``second_federating_daphne`` is another such process. ``federate`` registers an upstream for another
tenant's server (its changes published at once), syncs it and binds it whole. ``sdk`` connects the official SDK client, as a customer's agent
would, in either era.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import orjson
import pytest
from mcp.client.client import Client, ConnectMode
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Access
from tests.e2e.conftest import Daphne, running_daphne
from tests.federation.upstream_server import UpstreamProcess

WAIT_SECONDS = 20.0
LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
LOOPBACK = "127.0.0.1"
MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def federating_daphne(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    env = {"MCP_OUTBOUND_ALLOWED_NETWORKS": LOOPBACK}
    with running_daphne(tmp_path_factory, env) as server:
        yield server


@pytest.fixture(scope="module")
def second_federating_daphne(federating_daphne: Daphne, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    """Another process like ``federating_daphne`` (a retry that reaches another process)."""
    env = {"MCP_OUTBOUND_ALLOWED_NETWORKS": LOOPBACK}
    with running_daphne(tmp_path_factory, env) as server:
        yield server


@pytest.fixture
def allow_loopback(settings: Any) -> None:
    """This process (which registers and syncs upstreams) may reach loopback too."""
    settings.MCP_APP = {
        **settings.MCP_APP,
        "OUTBOUND_ALLOWED_NETWORKS": [LOOPBACK],
    }


@pytest.fixture
def mcp_host_upstream(
    transactional_db: None, access_factory: Callable[..., Access], tool_factory: Callable[..., Any]
) -> Access:
    """Tenant A's handshake-era server with the tools the federation tests call through tenant B."""
    access = access_factory(tools=("echo", "ask_name", "chatty", "boom"), protocol_versions=LEGACY)
    tool_factory(access.server, "worker_job", position=10, binding={"execution": "inline"})
    return access


@pytest.fixture
def federate(allow_loopback: None, transactional_db: None) -> Callable[..., Any]:
    """Register ``url`` as an upstream of ``access``'s tenant, sync it and bind it whole to its server. Its later
    changes are published at once (``on_change="publish"``) unless the test asks otherwise: these tests follow an
    upstream's changes to the client; holding them for approval is ``test_drift.py``'s."""
    from mcp_app.federation.sync import bind, sync_upstream
    from mcp_app.models import Upstream

    def register(
        access: Access,
        url: str,
        *,
        prefix: str = "up_",
        secret: dict[str, str] | None = None,
        name: str = "upstream",
        on_change: str = Upstream.OnChange.PUBLISH,
        **fields: Any,
    ) -> Any:
        registered = Upstream(tenant=access.tenant, name=name, url=url, prefix=prefix, on_change=on_change, **fields)
        if secret:
            registered.set_secret_headers(secret)
        registered.save()
        report = sync_upstream(registered)
        assert report.ok, report.error
        bind(registered, access.server)
        registered.refresh_from_db()
        return registered

    return register


def upstream_url(daphne: Daphne, access: Access) -> str:
    return f"{daphne.url}{access.path}?{access.query}"


def bearer(access: Access) -> dict[str, str]:
    return {"Authorization": f"Bearer {access.raw_token}"}


@asynccontextmanager
async def sdk(base: str, access: Access, *, mode: ConnectMode, **callbacks: Any) -> AsyncIterator[Client]:
    """The official SDK client connected to ``access``'s server at ``base`` (the HTTP client is ours to close)."""
    async with httpx2.AsyncClient(headers=bearer(access)) as http_client:
        transport = streamable_http_client(f"{base}{access.path}?{access.query}", http_client=http_client)
        async with Client(transport, mode=mode, read_timeout_seconds=WAIT_SECONDS, **callbacks) as client:
            yield client


@pytest.fixture
def private_upstream(upstream_server: Callable[[str], UpstreamProcess]) -> UpstreamProcess:
    """An upstream process of the test's own (the test may stop it)."""
    return upstream_server("stateful")


@pytest.fixture
def federated(
    private_upstream: UpstreamProcess, access_factory: Callable[..., Access], federate: Callable[..., Any]
) -> tuple[Access, Any]:
    """A server with no tool of its own, bound whole to ``private_upstream``: the access and the upstream row."""
    access = access_factory(tools=())
    return access, federate(access, private_upstream.url)


@pytest.fixture
async def close_pool() -> Any:
    """Close this process's upstream connections after the test (they belong to its event loop)."""
    yield
    from mcp_app.federation import pool

    await pool.close()


def failure(result: dict[str, Any]) -> str:
    """The ``code`` of an upstream failure result (and that it is one)."""
    assert result["isError"] is True, result
    detail = orjson.loads(result["content"][1]["text"])
    assert detail["error_type"] == "upstream_error"
    return str(detail["code"])


def texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    raise AssertionError("the test answers the input_required itself")


def answering(
    **content: Any,
) -> tuple[list[str], Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]]:
    """The messages an elicitation callback was asked (in order), and that callback: it accepts with ``content``."""
    asked: list[str] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content=content)

    return asked, answer


def stateless(base: str, access: Access) -> AbstractAsyncContextManager[Client]:
    """A stateless (2026-07-28) SDK client at ``base`` that answers no elicitation itself (the test retries)."""
    return sdk(base, access, mode=MODERN, elicitation_callback=never)


async def answer_on_another_daphne(first: str, second: str, access: Access) -> types.CallToolResult:
    """Call ``up_ask_name`` statelessly at ``first``, and answer its ``input_required`` by a retry at ``second``."""
    async with asyncio.timeout(WAIT_SECONDS), stateless(first, access) as one, stateless(second, access) as two:
        asked = await one.session.call_tool("up_ask_name", {}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked
        [key] = (asked.input_requests or {}).keys()
        answer = types.ElicitResult(action="accept", content={"name": "Grace"})
        return await two.session.call_tool(
            "up_ask_name", {}, input_responses={key: answer}, request_state=asked.request_state
        )
