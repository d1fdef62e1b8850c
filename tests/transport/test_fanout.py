"""Idle GET streams in the process's fan-out (``transport.fanout``), at the wire: one subscription routes each
notification to the streams of the group it names (a session's to that session's stream only), keep-alives and
notifications reach many streams in order, and a stream its client closes leaves the fan-out (its groups, its
subscription and its stream slot go with the last one). In memory and on Redis alike (``own_channel_layer``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from channels.layers import get_channel_layer
from django.test import override_settings

from mcp_app.events import Broadcast, server_group, session_group
from mcp_app.models.sessions import session_digest
from mcp_app.transport.fanout import fan_out
from tests.helpers import communicator, open_session, wait_until

STREAMS = 6


async def open_get(access: Any, session_id: str | None = None) -> Any:
    headers = {"accept": "text/event-stream", **({"mcp-session-id": session_id} if session_id else {})}
    comm = communicator(access, method="GET", headers=headers)
    await comm.send_input({"type": "http.request", "body": b""})
    start = await comm.receive_output(timeout=5)
    assert start["status"] == 200
    assert b": ready" in (await comm.receive_output(timeout=5))["body"]
    return comm


async def next_data(comm: Any) -> Any:
    """The next event's data, past keep-alives."""
    while True:
        body = (await comm.receive_output(timeout=5))["body"]
        for line in body.decode().splitlines():
            if line.startswith("data: "):
                return orjson.loads(line[len("data: ") :])


async def close(comm: Any) -> None:
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)


def session_key(session_id: str) -> str:
    return session_digest(session_id)[:32]  # as ``SessionEntry.key``


async def broadcast(group: str, message: dict[str, Any]) -> None:
    await get_channel_layer().group_send(group, Broadcast(message, group).to_wire())


async def test_a_notification_reaches_the_streams_of_the_group_it_names_only(access, own_channel_layer):
    sessions = [await open_session(access) for _ in range(STREAMS)]
    streams = [await open_get(access, session_id) for session_id in sessions]
    assert len(fan_out()) == STREAMS

    everyone = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    await broadcast(server_group(access.server.pk), everyone)
    assert [await next_data(comm) for comm in streams] == [everyone] * STREAMS

    # A session's notification reaches its own stream, and no other: the next event the others see is the
    # server's second one.
    mine = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "3"}}
    await broadcast(session_group(session_key(sessions[3])), mine)
    second = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
    await broadcast(server_group(access.server.pk), second)
    heard = [await next_data(comm) for comm in streams]
    assert heard[3] == mine and await next_data(streams[3]) == second
    assert heard[:3] + heard[4:] == [second] * (STREAMS - 1)
    for comm in streams:
        await close(comm)


async def test_keep_alives_reach_every_idle_stream(access, own_channel_layer):
    with override_settings(MCP_APP={"SSE_KEEPALIVE_SECONDS": 0.05}):
        streams = [await open_get(access) for _ in range(STREAMS)]
        for _ in range(2):
            bodies = [(await comm.receive_output(timeout=5))["body"] for comm in streams]
            assert bodies == [b": keep-alive\n\n"] * STREAMS
        for comm in streams:
            await close(comm)


async def test_a_stream_closed_by_its_client_leaves_the_fan_out_and_the_last_takes_the_subscription(
    access, own_channel_layer
):
    session_id = await open_session(access)
    first, second = await open_get(access, session_id), await open_get(access)
    fanout = fan_out()
    assert len(fanout) == 2

    await close(first)
    assert len(fanout) == 1
    # The stream that stays still hears its server's notifications through the one subscription.
    change = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    await broadcast(server_group(access.server.pk), change)
    assert await next_data(second) == change

    await close(second)
    assert len(fanout) == 0
    # No subscription left (its receive task ended), no keep-alive task: an idle process runs nothing for streams.
    await wait_until(
        lambda: not [task for task in asyncio.all_tasks() if "fanout" in repr(task.get_coro())],
        what="the fan-out's tasks to end",
    )


async def test_a_stream_its_client_leaves_gives_its_slot_back(access, own_channel_layer, settings):
    settings.MCP_APP = {**settings.MCP_APP, "STREAMS_PER_AGENT": 1}
    comm = await open_get(access)
    refused = communicator(access, method="GET", headers={"accept": "text/event-stream"})
    await refused.send_input({"type": "http.request", "body": b""})
    assert (await refused.receive_output(timeout=5))["status"] == 429
    await refused.wait(timeout=5)
    await close(comm)
    await close(await open_get(access))
