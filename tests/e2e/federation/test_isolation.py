"""Upstream entries under grants and tenants: a token sees and calls exactly the upstream entries its grant
names (an entry outside it answers like a name that does not exist), including entries a later sync adds only
when its grant is full; and no tenant can bind, see or call another tenant's upstream.

Calls go through the real consumer in this process to a real upstream (the SDK's ``MCPServer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.conftest import Access
from tests.federation.upstream_server import UpstreamProcess
from tests.helpers import call, result_of, rpc

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_pool")]


def with_token(access: Access, **grant: Any) -> Access:
    from mcp_app.models import AgentToken

    token, raw = AgentToken.objects.issue_token(access.agent, servers=[access.server], **grant)
    return Access(tenant=access.tenant, server=access.server, agent=access.agent, token=token, raw_token=raw)


async def names(access: Access) -> set[str]:
    return {tool["name"] for tool in result_of(await call(access, rpc("tools/list")))["tools"]}


async def test_a_grant_filters_upstream_entries_like_any_entry(
    stateless_upstream: UpstreamProcess, access_factory: Callable[..., Access], federate: Callable[..., Any]
) -> None:
    from mcp_app.models import Tool

    def build() -> tuple[Access, Access]:
        access = access_factory(tools=())
        upstream = federate(access, stateless_upstream.url, prefix="g_")
        echo = Tool.objects.get(upstream=upstream, name="g_echo")
        return access, with_token(access, tools=[echo])

    full, limited = await sync_to_async(build)()

    assert {"g_echo", "g_add"} <= await names(full)
    assert await names(limited) == {"g_echo"}
    allowed = result_of(await call(limited, rpc("tools/call", {"name": "g_echo", "arguments": {"text": "ok"}})))
    refused = await call(limited, rpc("tools/call", {"name": "g_add", "arguments": {"a": 1, "b": 2}}))
    unknown = await call(limited, rpc("tools/call", {"name": "g_nothing", "arguments": {}}))
    assert allowed["content"][0]["text"] == "ok"
    assert refused.status == unknown.status
    assert refused.json()["error"]["code"] == unknown.json()["error"]["code"] == -32602


def test_an_upstream_cannot_be_bound_to_another_tenants_server(
    stateless_upstream: UpstreamProcess,
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],
) -> None:
    from mcp_app.federation.sync import bind
    from mcp_app.models import ServerTool, UpstreamBinding

    owner = access_factory(tools=())
    stranger = access_factory(tools=())
    upstream = federate(owner, stateless_upstream.url, prefix="o_")

    with pytest.raises(ValueError, match="belong to different tenants"):
        bind(upstream, stranger.server)

    assert not UpstreamBinding.objects.filter(server=stranger.server).exists()
    assert not ServerTool.objects.filter(server=stranger.server).exists()


async def test_a_disabled_upstream_leaves_the_catalog_until_enabled_again(
    stateless_upstream: UpstreamProcess, access_factory: Callable[..., Access], federate: Callable[..., Any]
) -> None:
    def build() -> tuple[Access, Any]:
        access = access_factory(tools=())
        return access, federate(access, stateless_upstream.url, prefix="d_")

    access, upstream = await sync_to_async(build)()

    def switch(enabled: bool) -> None:
        upstream.enabled = enabled
        upstream.save()

    assert "d_echo" in await names(access)
    await sync_to_async(switch)(False)
    assert await names(access) == set()
    await sync_to_async(switch)(True)
    assert "d_echo" in await names(access)
