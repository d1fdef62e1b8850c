"""Two daphne processes sharing the database and the channel layer, as behind a load balancer without sticky
routing: a session opened on one is served by the other, an admin edit made through one reaches a stream held
by the other, and a sampling answer POSTed to one reaches the tool waiting on the other.

The last two need a channel layer shared across processes (Redis): without ``REDIS_URL`` they skip, and under
``MCP_REQUIRE_SERVICES=1`` they fail instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import admin_session, data_messages, demo_tenant_token, endpoint, initialize, needs_shared_layer
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

WAIT = 10.0


async def test_a_session_opened_on_one_process_is_served_and_ended_by_the_other(
    daphne_url: str, second_daphne: Any, live_access: Access
) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        opened = await http.post(endpoint(daphne_url, live_access), json=initialize({}), headers=headers(live_access))
        session_id = opened.headers["mcp-session-id"]
        on_session = headers(live_access, **{"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"})
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "b"}},
        }
        served = await http.post(endpoint(second_daphne.url, live_access), json=call, headers=on_session)
        ended = await http.delete(endpoint(second_daphne.url, live_access), headers=on_session)
        # The first process cached the session when it opened it; the end reaches it within a second (the
        # invalidation bound), at once on Redis, within a poll of the database log without it.
        deadline = time.monotonic() + 1.0
        while (
            after := await http.post(endpoint(daphne_url, live_access), json=call, headers=on_session)
        ).status_code == 200:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
    assert served.status_code == 200
    assert served.json()["result"]["content"] == [{"type": "text", "text": "b"}]
    assert ended.status_code == 204
    assert after.status_code == 404


@pytest.fixture
def admin_login(transactional_db: None, live_access: Access) -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("operator", "operator@example.test", "a-long-test-password")
    return "operator", "a-long-test-password"


async def test_an_admin_edit_on_one_process_reaches_a_stream_on_the_other(
    daphne_url: str, second_daphne: Any, live_access: Access, admin_login: tuple[str, str]
) -> None:
    needs_shared_layer()
    from channels.db import database_sync_to_async

    from mcp_app.models import ServerTool

    binding = await database_sync_to_async(
        lambda: ServerTool.objects.select_related("tool").get(server=live_access.server, tool__name="echo")
    )()
    async with httpx.AsyncClient(timeout=WAIT) as admin, httpx.AsyncClient(timeout=WAIT) as client:
        csrf = await admin_session(admin, daphne_url, admin_login)
        stream_headers = headers(live_access, Accept="text/event-stream")
        async with client.stream("GET", endpoint(second_daphne.url, live_access), headers=stream_headers) as stream:
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT):
                while (await anext(lines)) != ": ready":
                    pass
                form = {
                    "server": live_access.server.pk,
                    "tool": binding.tool.pk,
                    "position": binding.position,
                    "name_override": "",
                    "description_override": "",
                    "csrfmiddlewaretoken": csrf,
                }  # "enabled" left out: the admin unticks it
                saved = await admin.post(f"{daphne_url}/admin/mcp_app/servertool/{binding.pk}/change/", data=form)
                assert saved.status_code == 302, saved.text[:500]
                message = await anext(data_messages(lines))
    assert message == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_a_sampling_answer_posted_to_one_process_reaches_the_tool_waiting_on_the_other(
    daphne_url: str, second_daphne: Any, transactional_db: None
) -> None:
    needs_shared_layer()
    from channels.db import database_sync_to_async

    from mcp_app.contrib.conformance.setup import ensure_conformance

    server = await database_sync_to_async(ensure_conformance)()
    token_raw = await database_sync_to_async(demo_tenant_token)(server)
    call = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "test_sampling", "arguments": {"prompt": "Capital of France?"}},
    }
    async with httpx.AsyncClient(timeout=WAIT) as first, httpx.AsyncClient(timeout=WAIT) as second:
        auth = {
            "Authorization": f"Bearer {token_raw[1]}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        url_a = f"{daphne_url}/mcp/{server.server_id}?agentId={token_raw[0]}"
        url_b = f"{second_daphne.url}/mcp/{server.server_id}?agentId={token_raw[0]}"
        opened = await first.post(url_a, json=initialize({"sampling": {}}), headers=auth)
        on_session = {**auth, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        async with first.stream("POST", url_a, json=call, headers=on_session) as response, asyncio.timeout(WAIT):
            messages = data_messages(response.aiter_lines())
            request = await anext(messages)
            assert request["method"] == "sampling/createMessage"
            answer = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {
                    "role": "assistant",
                    "content": {"type": "text", "text": "Paris"},
                    "model": "m",
                    "stopReason": "endTurn",
                },
            }
            accepted = await second.post(url_b, json=answer, headers=on_session)
            assert accepted.status_code == 202
            final = await anext(messages)
    assert final["id"] == 5
    assert final["result"]["content"][0]["text"] == "LLM response: Paris"


async def test_a_notification_reaches_every_idle_stream_of_both_processes_and_a_sessions_only_its_own(
    daphne_url: str, second_daphne: Any, live_access: Access
) -> None:
    """Each process holds its idle GET streams in one fan-out (one channel on the layer for all of them)."""
    needs_shared_layer()
    from channels.layers import get_channel_layer

    from mcp_app.events import Broadcast, server_group, session_group
    from mcp_app.models.sessions import session_digest

    per_process = 4
    everyone = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    then = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
    layer = get_channel_layer()
    async with httpx.AsyncClient(timeout=WAIT) as http, contextlib.AsyncExitStack() as stack:
        streams, session_ids = [], []
        for base in [daphne_url] * per_process + [second_daphne.url] * per_process:
            opened = await http.post(endpoint(base, live_access), json=initialize({}), headers=headers(live_access))
            session_id = opened.headers["mcp-session-id"]
            on_session = headers(live_access, Accept="text/event-stream", **{"Mcp-Session-Id": session_id})
            stream = await stack.enter_async_context(
                http.stream("GET", endpoint(base, live_access), headers=on_session)
            )
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT):
                while (await anext(lines)) != ": ready":
                    pass
            streams.append(data_messages(lines))
            session_ids.append(session_id)
        group = server_group(live_access.server.pk)
        await layer.group_send(group, Broadcast(everyone, group).to_wire())
        one = session_group(session_digest(session_ids[-1])[:32])  # a stream of the second process
        mine = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
        await layer.group_send(one, Broadcast(mine, one).to_wire())
        await layer.group_send(group, Broadcast(then, group).to_wire())
        async with asyncio.timeout(WAIT):
            heard = [[await anext(messages), await anext(messages)] for messages in streams]
            last = await anext(streams[-1])
    assert heard[:-1] == [[everyone, then]] * (2 * per_process - 1)
    assert heard[-1] == [everyone, mine] and last == then
