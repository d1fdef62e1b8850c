"""Handshake-era sessions at the wire: minting, scoping, expiry, termination, and what lives on them
(protocol version, log level, resource subscriptions)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from mcp_app.models import AgentToken, McpServer, McpSession, Resource, ServerResource
from mcp_app.models.sessions import session_digest
from mcp_app.protocol.errors import INVALID_REQUEST
from tests.helpers import call, communicator, open_session, rpc, sse_messages

VISIBLE_ASCII = re.compile(r"^[\x21-\x7e]+$")


def initialize(version: str = "2025-11-25") -> dict:
    return rpc(
        "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    )


async def test_initialize_mints_a_visible_ascii_session_id_stored_as_a_digest(access, orm):
    session_id = await open_session(access)
    assert VISIBLE_ASCII.match(session_id) and len(session_id) >= 43
    stored = await orm(lambda: list(McpSession.objects.values("digest", "protocol_version", "client_info")))
    assert stored == [
        {
            "digest": session_digest(session_id),
            "protocol_version": "2025-11-25",
            "client_info": {"name": "t", "version": "1"},
        }
    ]


async def test_each_initialize_opens_a_new_session(access):
    assert await open_session(access) != await open_session(access)


async def test_requests_on_the_session_use_its_version(access):
    session_id = await open_session(access, "2025-06-18")
    # 2025-06-18 removed batches: a batch on this session is refused although no version header is sent.
    reply = await call(access, [rpc("ping")], headers={"mcp-session-id": session_id})
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    ok = await call(access, rpc("ping"), headers={"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"})
    assert ok.status == 200


async def test_a_supported_version_header_that_disagrees_with_the_session_is_served_under_the_sessions(access):
    """The spec asks 400 only for invalid or unsupported versions; the negotiated version governs the session."""
    session_id = await open_session(access, "2025-06-18")
    progress = {"name": "progress_demo", "arguments": {"steps": 1}, "_meta": {"progressToken": "p"}}
    reply = await call(
        access,
        rpc("tools/call", progress),
        headers={"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"},
    )
    assert reply.status == 200
    assert "retry:" not in reply.body.decode()  # no 2025-11-25 priming event on a 2025-06-18 session


async def test_unknown_session_is_404(access):
    reply = await call(access, rpc("ping"), headers={"mcp-session-id": "not-a-session"})
    assert reply.status == 404
    assert reply.content_type == "application/json"


async def test_delete_terminates_and_later_use_is_404(access):
    session_id = await open_session(access)
    assert (await call(access, method="DELETE", headers={"mcp-session-id": session_id})).status == 204
    assert (await call(access, rpc("ping"), headers={"mcp-session-id": session_id})).status == 404
    assert (await call(access, method="DELETE", headers={"mcp-session-id": session_id})).status == 404


async def test_idle_session_expires(access, orm):
    session_id = await open_session(access)
    await orm(McpSession.objects.update, last_seen_at=timezone.now() - timedelta(seconds=120))
    with override_settings(MCP_APP={"SESSION_IDLE_SECONDS": 60}):
        assert (await call(access, rpc("ping"), headers={"mcp-session-id": session_id})).status == 404


async def test_session_of_another_agent_is_404(access, orm, agent_factory, token_factory):
    session_id = await open_session(access)
    other = await orm(agent_factory, tenant=access.tenant)
    _token, raw = await orm(token_factory, agent=other, servers=[access.server])
    reply = await call(
        access,
        rpc("ping"),
        headers={"mcp-session-id": session_id, "authorization": f"Bearer {raw}"},
        query=f"agentId={other.agent_id}",
    )
    assert reply.status == 404


async def test_session_on_another_server_is_404(access, orm):
    session_id = await open_session(access)
    other = await orm(McpServer.objects.create, tenant=access.tenant, server_id="second", name="second")
    await orm(lambda: AgentToken.objects.get(pk=access.token.pk).servers.add(other))
    reply = await call(access, rpc("ping"), headers={"mcp-session-id": session_id}, path="/mcp/second")
    assert reply.status == 404


async def test_requests_without_a_session_are_stateless_unless_the_server_requires_one(access, orm):
    assert (await call(access, rpc("ping"))).status == 200
    access.server.sessions_required = True
    await orm(access.server.save)  # an edit through the model (as the admin makes it) reaches cached servers
    assert (await call(access, rpc("ping"))).status == 400
    session_id = await open_session(access)
    assert (await call(access, rpc("ping"), headers={"mcp-session-id": session_id})).status == 200


async def test_set_level_governs_log_messages_on_the_session(make_access):
    access = await make_access(tools=("chatty",))
    session_id = await open_session(access)
    headers = {"mcp-session-id": session_id}
    chatty = rpc("tools/call", {"name": "chatty", "arguments": {}})
    quiet = await call(access, chatty, headers=headers)
    assert quiet.content_type == "application/json"  # no level set: no messages, so no stream
    assert (await call(access, rpc("logging/setLevel", {"level": "warning"}), headers=headers)).json()["result"] == {}
    loud = await call(access, chatty, headers=headers)
    assert loud.content_type.startswith("text/event-stream")
    messages = loud.sse_messages()
    assert [m["params"]["level"] for m in messages[:-1]] == ["warning", "error"]
    assert all(m["method"] == "notifications/message" and m["params"]["logger"] == "chatty" for m in messages[:-1])
    assert messages[-1]["result"]["content"]


async def test_set_level_validates_and_needs_a_session(access):
    session_id = await open_session(access)
    bad = await call(access, rpc("logging/setLevel", {"level": "loud"}), headers={"mcp-session-id": session_id})
    assert bad.json()["error"]["code"] == -32602
    stateless = await call(access, rpc("logging/setLevel", {"level": "info"}))
    assert stateless.json()["error"]["code"] == INVALID_REQUEST


async def test_resource_updates_reach_the_subscribed_session_stream_only(access, orm):
    def add_resource():
        resource = Resource.objects.create(
            tenant=access.tenant, uri="test://watched", name="watched", text="v1", mime_type="text/plain"
        )
        ServerResource.objects.create(server=access.server, resource=resource)
        return resource

    resource = await orm(add_resource)
    subscribed = await open_session(access)
    bystander = await open_session(access)
    reply = await call(
        access, rpc("resources/subscribe", {"uri": "test://watched"}), headers={"mcp-session-id": subscribed}
    )
    assert reply.json()["result"] == {}
    missing = await call(
        access, rpc("resources/subscribe", {"uri": "test://nope"}), headers={"mcp-session-id": subscribed}
    )
    assert missing.json()["error"]["code"] == -32002

    streams = []
    for session_id in (subscribed, bystander):
        comm = communicator(access, method="GET", headers={"accept": "text/event-stream", "mcp-session-id": session_id})
        await comm.send_input({"type": "http.request", "body": b""})
        assert (await comm.receive_output(timeout=5))["status"] == 200
        # A 2025-11-25 session stream is resumable: a priming event (id, retry, empty data) precedes ": ready".
        first = (await comm.receive_output(timeout=5))["body"]
        assert re.match(rb"^id: \S+\.0\nretry: \d+\ndata: \n\n: ready\n\n$", first), first
        streams.append(comm)

    resource.text = "v2"
    await orm(resource.save)
    # New content, same definition: the list did not change (no list_changed); only the subscriber hears of it.
    assert sse_messages((await streams[0].receive_output(timeout=5))["body"]) == [
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://watched"}},
    ]
    assert await streams[1].receive_nothing(timeout=0.2)
    for comm in streams:
        await comm.send_input({"type": "http.disconnect"})
        await comm.wait(timeout=5)


async def test_get_stream_with_unknown_session_is_404(access):
    reply = await call(access, method="GET", headers={"accept": "text/event-stream", "mcp-session-id": "nope"})
    assert reply.status == 404


@pytest.mark.parametrize("method", ["resources/subscribe", "resources/unsubscribe"])
async def test_subscriptions_need_a_session(access, method):
    reply = await call(access, rpc(method, {"uri": "test://x"}))
    assert reply.json()["error"]["code"] == INVALID_REQUEST
