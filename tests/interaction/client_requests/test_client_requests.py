"""Handshake era: server-to-client requests during a call (elicitation, sampling) answered by a separate POST,
and ``notifications/cancelled`` stopping a running call."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from mcp_app.transport import cancellation, membership
from tests.helpers import call, communicator, open_session, own_channel_layer, rpc  # noqa: F401  (fixture)

# channels-redis keeps receive locks on the layer instance: a receive an earlier test of the process left pending
# when its loop closed would fail these calls' receives ("bound to a different event loop").
pytestmark = pytest.mark.usefixtures("own_channel_layer")


async def read_event(comm) -> dict:
    """The next JSON-RPC message on an SSE response, skipping priming events (an id with empty data)."""
    while True:
        frame = await comm.receive_output(timeout=5)
        for line in frame["body"].decode().splitlines():
            if line.startswith("data: ") and line[len("data: ") :].strip():
                return orjson.loads(line[len("data: ") :])


async def test_elicitation_goes_out_on_the_call_stream_and_the_answer_comes_back_by_post(make_access):
    access = await make_access(tools=("ask_name",))
    session_id = await open_session(access, capabilities={"elicitation": {}})
    headers = {"mcp-session-id": session_id}
    comm = communicator(access, rpc("tools/call", {"name": "ask_name", "arguments": {}}, id=11), headers=headers)
    await comm.send_input({"type": "http.request", "body": comm.body})
    start = await comm.receive_output(timeout=5)
    assert start["status"] == 200
    assert dict(start["headers"])[b"content-type"].startswith(b"text/event-stream")
    request = await read_event(comm)
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "What is your name?"
    assert isinstance(request["id"], str)

    answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}
    accepted = await call(access, answer, headers=headers)
    assert accepted.status == 202

    response = await read_event(comm)
    await comm.wait(timeout=5)
    assert response == {"jsonrpc": "2.0", "id": 11, "result": {"content": [{"type": "text", "text": "Hello, Ada!"}]}}


async def test_an_answer_from_another_session_does_not_reach_the_call(make_access):
    access = await make_access(tools=("ask_name",))
    session_id = await open_session(access, capabilities={"elicitation": {}})
    intruder = await open_session(access, capabilities={"elicitation": {}})
    comm = communicator(
        access, rpc("tools/call", {"name": "ask_name", "arguments": {}}, id=12), headers={"mcp-session-id": session_id}
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    await comm.receive_output(timeout=5)
    request = await read_event(comm)
    forged = {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"name": "Mallory"}}}
    await call(access, forged, headers={"mcp-session-id": intruder})
    assert await comm.receive_nothing(timeout=0.2)
    real = {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "decline"}}
    await call(access, real, headers={"mcp-session-id": session_id})
    assert (await read_event(comm))["result"]["content"][0]["text"] == "no name (decline)"
    await comm.wait(timeout=5)


async def test_client_error_answer_is_a_tool_error(make_access):
    access = await make_access(tools=("ask_name",))
    session_id = await open_session(access, capabilities={"elicitation": {}})
    comm = communicator(
        access, rpc("tools/call", {"name": "ask_name", "arguments": {}}, id=13), headers={"mcp-session-id": session_id}
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    await comm.receive_output(timeout=5)
    request = await read_event(comm)
    refusal = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "User closed the dialog"}}
    await call(access, refusal, headers={"mcp-session-id": session_id})
    result = (await read_event(comm))["result"]
    await comm.wait(timeout=5)
    assert result["isError"] is True
    assert "User closed the dialog" in result["content"][0]["text"]


async def test_without_the_capability_the_tool_fails_without_asking(make_access):
    access = await make_access(tools=("ask_name",))
    session_id = await open_session(access, capabilities={})
    reply = await call(
        access, rpc("tools/call", {"name": "ask_name", "arguments": {}}), headers={"mcp-session-id": session_id}
    )
    assert reply.content_type == "application/json"
    result = reply.json()["result"]
    assert result["isError"] is True
    assert "does not support elicitation" in result["content"][0]["text"]


@pytest.fixture
def listening():
    """An event set once a call listens for cancellation on the channel layer (the transport's hook)."""
    heard = asyncio.Event()

    def hook(group: str) -> None:
        heard.set()

    cancellation.listening_hooks.append(hook)
    yield heard
    cancellation.listening_hooks.remove(hook)


async def cancelled_response(comm) -> None:
    """The call's response ends without a JSON-RPC answer (the spec: none for a cancelled request)."""
    start = await comm.receive_output(timeout=5)
    end = await comm.receive_output(timeout=5)
    await comm.wait(timeout=5)
    assert start["status"] == 200
    assert end["body"] == b"" and not end.get("more_body")


async def test_notifications_cancelled_stops_a_call_that_listens(make_access, fresh_gate, listening):
    access = await make_access(tools=("wait_for_release",))
    session_id = await open_session(access, capabilities={})
    headers = {"mcp-session-id": session_id}
    comm = communicator(
        access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="job-1"), headers=headers
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(listening.wait(), timeout=5)
    cancel = rpc("notifications/cancelled", {"requestId": "job-1", "reason": "user"}, id=None)
    assert (await call(access, cancel, headers=headers)).status == 202
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await cancelled_response(comm)


async def test_a_cancellation_in_the_first_moments_of_a_call_is_not_lost(
    make_access, fresh_gate, listening, monkeypatch
):
    # The call would join its group only after a minute: the notice must reach it without the channel layer.
    monkeypatch.setattr(cancellation, "CANCEL_WATCH_DELAY_SECONDS", 60.0)
    access = await make_access(tools=("wait_for_release",))
    session_id = await open_session(access, capabilities={})
    headers = {"mcp-session-id": session_id}
    comm = communicator(
        access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="job-3"), headers=headers
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    assert not listening.is_set()
    cancel = rpc("notifications/cancelled", {"requestId": "job-3"}, id=None)
    assert (await call(access, cancel, headers=headers)).status == 202
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await cancelled_response(comm)


async def test_notifications_cancelled_stops_a_sessionless_call_that_listens(make_access, fresh_gate, listening):
    """Without a session the call runs in its application's own task; the cancellation reaches it there."""
    access = await make_access(tools=("wait_for_release",))
    comm = communicator(access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="job-5"))
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(listening.wait(), timeout=5)
    cancel = rpc("notifications/cancelled", {"requestId": "job-5"}, id=None)
    assert (await call(access, cancel)).status == 202
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await cancelled_response(comm)


async def test_a_cancellation_reaches_a_sessionless_call_before_its_message_loop_starts(
    make_access, fresh_gate, listening, monkeypatch
):
    # Neither the call's group nor its disconnect watch for a minute: the notice itself starts the message loop.
    monkeypatch.setattr(cancellation, "CANCEL_WATCH_DELAY_SECONDS", 60.0)
    monkeypatch.setattr(membership, "WATCH_DELAY_SECONDS", 60.0)
    access = await make_access(tools=("wait_for_release",))
    comm = communicator(access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="job-6"))
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    cancel = rpc("notifications/cancelled", {"requestId": "job-6"}, id=None)
    assert (await call(access, cancel)).status == 202
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await cancelled_response(comm)
    assert not listening.is_set()


async def test_a_cancellation_that_arrives_before_its_call_still_stops_it(make_access, fresh_gate, listening):
    """The notice overtakes its request (two connections; another process): it waits for the call."""
    access = await make_access(tools=("wait_for_release",))
    session_id = await open_session(access, capabilities={})
    headers = {"mcp-session-id": session_id}
    cancel = rpc("notifications/cancelled", {"requestId": "job-4"}, id=None)
    assert (await call(access, cancel, headers=headers)).status == 202
    comm = communicator(
        access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="job-4"), headers=headers
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await cancelled_response(comm)


async def test_cancelling_another_clients_request_id_does_nothing(make_access, fresh_gate, listening):
    access = await make_access(tools=("wait_for_release",))
    owner = await open_session(access, capabilities={})
    other = await open_session(access, capabilities={})
    comm = communicator(
        access,
        rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="job-2"),
        headers={"mcp-session-id": owner},
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    # Listening everywhere: a cancellation addressed to this call would now stop it.
    await asyncio.wait_for(listening.wait(), timeout=5)
    cancel = rpc("notifications/cancelled", {"requestId": "job-2"}, id=None)
    for _ in range(5):
        assert (await call(access, cancel, headers={"mcp-session-id": other})).status == 202
    assert await comm.receive_nothing(timeout=0.2)
    assert not fresh_gate.gate.cancelled.is_set()
    fresh_gate.gate.release.set()
    start = await comm.receive_output(timeout=5)
    body = await comm.receive_output(timeout=5)
    await comm.wait(timeout=5)
    assert start["status"] == 200
    assert orjson.loads(body["body"])["result"]["content"][0]["text"] == "released"


async def test_a_tool_returning_input_required_is_served_in_band_in_the_handshake_era(make_access):
    """One tool, both eras: its InputRequired becomes real server-to-client requests on a 2025 session."""
    access = await make_access(tools=("confirm_action",))
    session_id = await open_session(access, capabilities={"elicitation": {}})
    headers = {"mcp-session-id": session_id}
    comm = communicator(
        access, rpc("tools/call", {"name": "confirm_action", "arguments": {"action": "deploy"}}, id=21), headers=headers
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    await comm.receive_output(timeout=5)
    request = await read_event(comm)
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Really do it?"
    await call(
        access,
        {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"ok": True}}},
        headers=headers,
    )
    result = (await read_event(comm))["result"]
    await comm.wait(timeout=5)
    assert result["content"] == [{"type": "text", "text": "confirmed"}]
    assert result["structuredContent"] == {
        "state": {"action": "deploy", "round": 1},
        "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
        "action": "deploy",
    }
