"""SSE at the wire: progress streams on POST, the GET stream (ready, keep-alives, list_changed), cancellation."""

from __future__ import annotations

import asyncio

import orjson
from django.test import override_settings

from mcp_app.models import ServerTool
from tests.helpers import call, communicator, rpc

PROGRESS_CALL = rpc(
    "tools/call", {"name": "progress_demo", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok-1"}}, id=5
)


async def test_progress_token_turns_the_answer_into_an_sse_stream(access):
    reply = await call(access, PROGRESS_CALL)
    assert reply.status == 200
    assert reply.content_type == "text/event-stream; charset=utf-8"
    assert reply.headers["cache-control"] == "no-cache"
    assert reply.headers["x-accel-buffering"] == "no"
    assert reply.body.endswith(b"\n\n")
    messages = reply.sse_messages()
    assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2, 3]
    assert all(
        m["method"] == "notifications/progress" and m["params"]["progressToken"] == "tok-1" for m in messages[:-1]
    )
    assert all(m["params"]["total"] == 3 for m in messages[:-1])
    assert messages[-1] == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {"content": [{"type": "text", "text": "Completed 3 steps."}]},
    }


async def test_without_progress_token_the_answer_is_plain_json(access):
    reply = await call(access, rpc("tools/call", {"name": "progress_demo", "arguments": {"steps": 3}}))
    assert reply.content_type == "application/json"
    assert reply.json()["result"]["content"][0]["text"] == "Completed 3 steps."


async def test_client_that_only_accepts_json_gets_json_without_progress(access):
    reply = await call(access, PROGRESS_CALL, headers={"accept": "application/json"})
    assert reply.content_type == "application/json"
    assert reply.json()["id"] == 5


async def test_get_stream_starts_with_ready_and_sends_keepalives(access):
    with override_settings(MCP_APP={"SSE_KEEPALIVE_SECONDS": 0.05}):
        comm = communicator(access, method="GET", headers={"accept": "text/event-stream"})
        await comm.send_input({"type": "http.request", "body": b""})
        start = await comm.receive_output(timeout=5)
        headers = dict(start["headers"])
        first = await comm.receive_output(timeout=5)
        second = await comm.receive_output(timeout=5)
        third = await comm.receive_output(timeout=5)
        await comm.send_input({"type": "http.disconnect"})
        await comm.wait(timeout=5)
    assert start["status"] == 200
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert first == {"type": "http.response.body", "body": b": ready\n\n", "more_body": True}
    assert second["body"] == third["body"] == b": keep-alive\n\n"
    assert second["more_body"] and third["more_body"]


async def test_catalog_edit_reaches_an_open_get_stream_as_list_changed(access, orm):
    comm = communicator(access, method="GET", headers={"accept": "text/event-stream"})
    await comm.send_input({"type": "http.request", "body": b""})
    await comm.receive_output(timeout=5)  # headers
    assert (await comm.receive_output(timeout=5))["body"] == b": ready\n\n"

    def disable_echo():
        binding = ServerTool.objects.get(server=access.server, tool__name="echo")
        binding.enabled = False
        binding.save()

    await orm(disable_echo)
    frame = await comm.receive_output(timeout=5)
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
    assert frame["more_body"] is True
    assert orjson.loads(frame["body"].removeprefix(b"data: ")) == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
    }
    names = [tool["name"] for tool in (await call(access, rpc("tools/list"))).json()["result"]["tools"]]
    assert "echo" not in names


async def test_list_changed_goes_only_to_streams_of_the_affected_server(access, make_access, orm):
    other = await make_access()
    comm = communicator(other, method="GET", headers={"accept": "text/event-stream"})
    await comm.send_input({"type": "http.request", "body": b""})
    await comm.receive_output(timeout=5)
    await comm.receive_output(timeout=5)
    binding = await orm(ServerTool.objects.filter(server=access.server).first)
    binding.description_override = "Edited."  # an edit that changes the list (one that changes nothing is silent)
    await orm(binding.save)
    # The other server's stream sees the edit of its own catalog, and only that one.
    own = await orm(ServerTool.objects.filter(server=other.server).first)
    own.description_override = "Edited."
    await orm(own.save)
    frame = await comm.receive_output(timeout=5)
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
    assert b"list_changed" in frame["body"]
    assert await comm.receive_nothing(timeout=0.1)


async def test_client_disconnect_cancels_the_running_tool(make_access, fresh_gate):
    access = await make_access(tools=("wait_for_release",))
    comm = communicator(access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}))
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    await comm.send_input({"type": "http.disconnect"})
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)
    assert fresh_gate.gate.cancelled.is_set()
