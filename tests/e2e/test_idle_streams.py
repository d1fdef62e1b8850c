"""Streams that sit idle on Redis for longer than any timeout in the stack still get what is sent to them.

channels-redis blocks in ``BZPOPMIN`` for 5 s and redis-py's default socket timeout is also 5 s: before the fix
the receive loop of a stream died on the first ``TimeoutError`` of that race while keep-alives went on, so a
stream looked alive and heard nothing. One 60-second idle window (the point of the test, not a way of timing
anything) is shared by three listeners on two daphne processes:

- a GET stream held by the second process hears a catalog edit made through the first;
- a tool waiting on the first process for an elicitation answer gets the answer POSTed to the second;
- a slow call on the first process is stopped by ``notifications/cancelled`` POSTed to the second.

Needs Redis (skips without ``REDIS_URL``; fails under ``MCP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import admin_session, data_messages, demo_tenant_token, endpoint, initialize, needs_shared_layer
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

IDLE_SECONDS = 60.0
WAIT = 15.0


@pytest.fixture
def idle_setup(transactional_db: None, access_factory: Any, tool_factory: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from mcp_app.contrib.conformance.setup import ensure_conformance
    from mcp_app.models import ServerTool

    access = access_factory()
    tool_factory(
        access.server,
        "slow",
        static_result={"content": [{"type": "text", "text": "late"}]},
        static_delay_ms=600_000,
        static_progress_steps=600,  # one a second over HTTP: the response starts; the layer stays idle
    )
    get_user_model().objects.create_superuser("idle-operator", "idle@example.test", "a-long-test-password")
    conformance = ensure_conformance()
    agent_id, raw = demo_tenant_token(conformance)
    binding = ServerTool.objects.select_related("tool").get(server=access.server, tool__name="echo")
    return {"access": access, "conformance": conformance, "agent_id": agent_id, "raw": raw, "binding": binding}


async def test_idle_streams_on_redis_still_receive_after_a_minute(
    daphne_url: str, second_daphne: Any, idle_setup: dict[str, Any]
) -> None:
    needs_shared_layer()
    access: Access = idle_setup["access"]
    binding = idle_setup["binding"]
    conformance_auth = {
        "Authorization": f"Bearer {idle_setup['raw']}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    conformance_path = f"/mcp/{idle_setup['conformance'].server_id}?agentId={idle_setup['agent_id']}"
    timeout = httpx.Timeout(WAIT, read=IDLE_SECONDS + WAIT)
    async with (
        httpx.AsyncClient(timeout=timeout) as admin,
        httpx.AsyncClient(timeout=timeout) as a,
        httpx.AsyncClient(timeout=timeout) as b,
    ):
        csrf = await admin_session(admin, daphne_url, ("idle-operator", "a-long-test-password"))
        # A session on the demo server (for the slow call) and one on the conformance server (for elicitation).
        opened = await a.post(endpoint(daphne_url, access), json=initialize({}), headers=headers(access))
        on_session = headers(
            access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        )
        opened_c = await a.post(
            f"{daphne_url}{conformance_path}", json=initialize({"elicitation": {}}), headers=conformance_auth
        )
        on_conformance = {
            **conformance_auth,
            "Mcp-Session-Id": opened_c.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        elicit_call = {
            "jsonrpc": "2.0",
            "id": "elicit-1",
            "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "Who are you?"}},
        }
        slow_call = {
            "jsonrpc": "2.0",
            "id": "slow-1",
            "method": "tools/call",
            "params": {"name": "slow", "_meta": {"progressToken": "p"}},
        }
        stream_headers = headers(access, Accept="text/event-stream")
        async with (
            b.stream("GET", endpoint(second_daphne.url, access), headers=stream_headers) as stream,
            a.stream("POST", f"{daphne_url}{conformance_path}", json=elicit_call, headers=on_conformance) as asking,
            a.stream("POST", endpoint(daphne_url, access), json=slow_call, headers=on_session) as slow,
        ):
            lines = stream.aiter_lines()
            asked = data_messages(asking.aiter_lines())
            async with asyncio.timeout(WAIT):
                while (await anext(lines)) != ": ready":
                    pass
                request = await anext(asked)
            assert request["method"] == "elicitation/create"

            # Idle: nothing crosses the channel layer for longer than every timeout of redis-py and channels-redis.
            await asyncio.sleep(IDLE_SECONDS)

            async with asyncio.timeout(WAIT):
                form = {
                    "server": access.server.pk,
                    "tool": binding.tool.pk,
                    "position": binding.position,
                    "name_override": "",
                    "description_override": "",
                    "csrfmiddlewaretoken": csrf,
                }
                saved = await admin.post(f"{daphne_url}/admin/mcp_app/servertool/{binding.pk}/change/", data=form)
                assert saved.status_code == 302, saved.text[:300]
                changed = await anext(data_messages(lines))

                answer = {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "result": {"action": "accept", "content": {"username": "ada", "email": "ada@example.test"}},
                }
                accepted = await b.post(f"{second_daphne.url}{conformance_path}", json=answer, headers=on_conformance)
                assert accepted.status_code == 202
                final = await anext(asked)

                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow-1"}}
                cancelled = await b.post(endpoint(second_daphne.url, access), json=cancel, headers=on_session)
                assert cancelled.status_code == 202
                rest = [message async for message in data_messages(slow.aiter_lines())]
    assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert final["id"] == "elicit-1"
    assert "action=accept" in final["result"]["content"][0]["text"]
    # The cancelled call's response ends without a JSON-RPC answer (the spec: no response to a cancelled request).
    assert [message for message in rest if "id" in message] == []
