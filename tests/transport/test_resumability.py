"""Resumable handshake-era streams: event ids, priming, disconnect is not cancellation, Last-Event-ID replay."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import call, communicator, events, open_session, rpc

PROGRESS = {"name": "progress_demo", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}


async def test_session_streams_carry_event_ids_and_a_priming_event(access):
    session_id = await open_session(access)
    reply = await call(access, rpc("tools/call", PROGRESS, id=1), headers={"mcp-session-id": session_id})
    found = events(reply.body)
    assert found[0][1] is None and found[0][0].endswith(".0")  # priming: an id and empty data
    assert "retry: 1000" in reply.body.decode()
    stream = found[0][0].rsplit(".", 1)[0]
    assert [event_id for event_id, _ in found] == [f"{stream}.{n}" for n in range(4)]
    assert found[-1][1]["result"]["content"][0]["text"] == "Completed 2 steps."


async def test_before_2025_11_25_ids_but_no_priming(access):
    session_id = await open_session(access, "2025-06-18")
    reply = await call(
        access,
        rpc("tools/call", PROGRESS, id=1),
        headers={"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"},
    )
    found = events(reply.body)
    assert all(message is not None for _, message in found)
    assert found[0][0].endswith(".1") and "retry:" not in reply.body.decode()


async def test_stateless_streams_have_no_ids(access):
    reply = await call(access, rpc("tools/call", PROGRESS, id=1))
    assert "id:" not in reply.body.decode()


async def start_call(access, session_id):
    comm = communicator(
        access,
        rpc("tools/call", {"name": "progress_then_wait", "arguments": {}, "_meta": {"progressToken": 1}}, id=7),
        headers={"mcp-session-id": session_id},
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    assert (await comm.receive_output(timeout=5))["status"] == 200
    body = b""
    while len(events(body)) < 2:  # priming + first progress
        body += (await comm.receive_output(timeout=5))["body"]
    return comm, events(body)


async def test_disconnect_is_not_cancellation_and_get_resumes_the_stream(make_access, fresh_gate):
    access = await make_access(tools=("progress_then_wait",))
    session_id = await open_session(access)
    comm, seen = await start_call(access, session_id)
    last_id = seen[-1][0]
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)

    resumed = communicator(
        access,
        method="GET",
        headers={"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": last_id},
    )
    await resumed.send_input({"type": "http.request", "body": b""})
    assert (await resumed.receive_output(timeout=5))["status"] == 200
    fresh_gate.gate.release.set()
    body = b""
    while True:
        chunk = await resumed.receive_output(timeout=5)
        body += chunk["body"]
        if not chunk.get("more_body"):
            break
    await resumed.wait(timeout=5)
    assert not fresh_gate.gate.cancelled.is_set()
    stream = last_id.rsplit(".", 1)[0]
    replayed = events(body)
    assert [event_id for event_id, _ in replayed] == [f"{stream}.2", f"{stream}.3"]
    assert replayed[0][1]["params"]["message"] == "second half"
    assert replayed[1][1] == {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "finished"}]}}


async def test_events_missed_while_away_are_replayed_from_the_store(make_access, fresh_gate):
    access = await make_access(tools=("progress_then_wait",))
    session_id = await open_session(access)
    comm, seen = await start_call(access, session_id)
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
    fresh_gate.gate.release.set()
    # The call finishes while nobody listens; wait for it through the server's own bookkeeping.
    from mcp_app.transport import consumer

    await asyncio.wait_for(asyncio.gather(*consumer.detached_calls), timeout=5)
    reply = await call(
        access,
        method="GET",
        headers={"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": seen[0][0]},
    )
    replayed = events(reply.body)
    assert [message.get("method", "response") for _, message in replayed] == [
        "notifications/progress",
        "notifications/progress",
        "response",
    ]


async def test_last_event_id_of_another_session_is_refused(access):
    mine = await open_session(access)
    theirs = await open_session(access)
    reply = await call(access, rpc("tools/call", PROGRESS, id=1), headers={"mcp-session-id": theirs})
    their_id = events(reply.body)[1][0]
    refused = await call(
        access, method="GET", headers={"accept": "text/event-stream", "mcp-session-id": mine, "last-event-id": their_id}
    )
    assert refused.status == 400


async def test_a_supported_version_header_that_differs_from_the_sessions_is_served_under_the_sessions(access):
    """Conformance ``server-sse-multiple-streams`` sends 2025-03-26 on a 2025-11-25 session: not a 400."""
    session_id = await open_session(access)
    reply = await call(
        access,
        rpc("tools/call", PROGRESS, id=1),
        headers={"mcp-session-id": session_id, "mcp-protocol-version": "2025-03-26"},
    )
    assert reply.status == 200
    found = events(reply.body)
    assert found[0][1] is None  # priming, a 2025-11-25 feature: the session's version governs
    assert found[-1][1]["result"]["content"][0]["text"] == "Completed 2 steps."


async def test_an_unsupported_version_header_on_a_session_is_400(access):
    session_id = await open_session(access)
    for version in ("1999-01-01", "not-a-version"):
        reply = await call(
            access, rpc("tools/list", id=1), headers={"mcp-session-id": session_id, "mcp-protocol-version": version}
        )
        assert reply.status == 400
        assert reply.json()["error"]["code"] < 0


async def test_a_tool_closing_its_stream_mid_call_is_resumed_by_last_event_id(make_access):
    """SEP-1699 (conformance ``server-sse-polling``): priming event, the stream ends before the result, and a GET
    with the priming event's id gets the result and ends."""
    access = await make_access(tools=("test_reconnection",))
    session_id = await open_session(access)
    comm = communicator(
        access,
        rpc("tools/call", {"name": "test_reconnection", "arguments": {}}, id=1),
        headers={"mcp-session-id": session_id},
    )
    await comm.send_input({"type": "http.request", "body": comm.body})
    start = await comm.receive_output(timeout=5)
    assert start["status"] == 200
    assert dict(start["headers"])[b"content-type"].startswith(b"text/event-stream")
    body = b""
    while True:
        frame = await comm.receive_output(timeout=5)
        body += frame["body"]
        if not frame.get("more_body"):
            break
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
    closed = events(body)
    assert [message for _, message in closed] == [None]  # the priming event only: no result on this stream
    assert "retry: " in body.decode()
    resumed = await call(
        access,
        method="GET",
        headers={"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": closed[0][0]},
    )
    assert resumed.status == 200
    replayed = events(resumed.body)
    assert replayed[-1][1] == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "Reconnection test completed"}]},
    }


async def test_a_resume_past_events_the_store_dropped_says_so(make_access, fresh_gate, use_backend):
    from mcp_app.transport.eventstore import MemoryEventStore

    use_backend("EVENT_STORE", MemoryEventStore(max_events=1))
    reply = await _resume_after_the_first_event(make_access, fresh_gate)
    assert b"events 1-2 of this stream were dropped" in reply.body
    assert events(reply.body)[-1][1]["result"]["content"][0]["text"] == "finished"


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_resume_past_events_the_byte_bound_dropped_says_so(make_access, fresh_gate, backend, use_backend):
    """The byte bound (``max_bytes``; 1 byte here: only the newest event stays) drops the oldest events first, in
    memory and in Redis, and a resume past them says so."""
    import secrets

    from mcp_app.transport.eventstore import MemoryEventStore, RedisEventStore
    from tests.conftest import require_redis

    if backend == "redis":
        store = RedisEventStore(require_redis(), prefix=f"test-bytes-{secrets.token_hex(4)}", max_bytes=1)
    else:
        store = MemoryEventStore(max_bytes=1)
    use_backend("EVENT_STORE", store)
    reply = await _resume_after_the_first_event(make_access, fresh_gate)
    assert b"events 1-2 of this stream were dropped" in reply.body
    assert events(reply.body)[-1][1]["result"]["content"][0]["text"] == "finished"


async def _resume_after_the_first_event(make_access, fresh_gate):
    """A call whose client went away after its first event; once it finished, a GET resumes after that event."""
    from mcp_app.transport import consumer

    access = await make_access(tools=("progress_then_wait",))
    session_id = await open_session(access)
    comm, seen = await start_call(access, session_id)
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
    fresh_gate.gate.release.set()
    await asyncio.wait_for(asyncio.gather(*consumer.detached_calls), timeout=5)
    return await call(
        access,
        method="GET",
        headers={"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": seen[0][0]},
    )
