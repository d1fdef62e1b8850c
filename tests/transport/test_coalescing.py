"""SSE coalescing and pipelined event-store appends (``transport.writer``), at the wire of the real consumer.

- Events produced in one turn of the event loop leave as one ``http.response.body``, each still its own SSE event
  (``progress_demo`` reports every step without yielding, so head, steps, answer and the end are one message).
- On a resumable (session) stream, the burst is appended to the store in one ``append_many`` call, and no byte of
  an event is sent before the store holds it: a client that saw an event can always resume after it.
- A resumed stream gets every event after the id it names, whichever id that is.
- The stream's first burst is the store's check: no check of its own before the head, which waits for that
  append; a store down at that burst is a 503 before any byte, as a failed check was. On Redis, a burst is one
  round trip.
- A store that fails mid-stream stops the stream: the unkept events are never sent, the call's answer is the
  -32603-style "unavailable" error on the stream.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcp_app.transport import backchannel, cancellation, eventstore, writer
from tests.conftest import require_redis
from tests.helpers import RedisRoundTrips, call, communicator, events, open_session, rpc, sse_messages


def progress(steps: int, delay_ms: int = 0) -> dict[str, Any]:
    arguments = {"steps": steps, "delay_ms": delay_ms}
    return {"name": "progress_demo", "arguments": arguments, "_meta": {"progressToken": "p"}}


async def raw_response(access: Any, body: Any, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every ASGI message of one response, as the server sent them."""
    comm = communicator(access, body, headers=headers)
    await comm.send_input({"type": "http.request", "body": comm.body})
    messages = [await comm.receive_output(timeout=5)]
    while messages[-1]["type"] != "http.response.body" or messages[-1].get("more_body"):
        messages.append(await comm.receive_output(timeout=5))
    await comm.wait(timeout=5)
    return messages


async def test_events_of_one_turn_are_one_body_message_and_separate_sse_events(access: Any) -> None:
    messages = await raw_response(access, rpc("tools/call", progress(5), id=3))
    assert messages[0]["type"] == "http.response.start"
    # The stream opened at once (the call has a progress token), so the answer may leave in a later message; the
    # five steps, produced in one turn, leave together.
    with_steps = [m for m in messages[1:] if b"notifications/progress" in m["body"]]
    assert len(with_steps) == 1
    assert messages[-1]["more_body"] is False
    sent = sse_messages(b"".join(m["body"] for m in messages[1:]))
    assert [m["params"]["progress"] for m in sent[:-1]] == [1, 2, 3, 4, 5]
    assert sent[-1]["id"] == 3 and sent[-1]["result"]["content"][0]["text"] == "Completed 5 steps."
    assert with_steps[0]["body"].count(b"data: ") >= 5  # each its own SSE event


async def test_a_session_stream_is_stored_in_one_call_before_any_byte_is_sent(
    access: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = await open_session(access)
    store = eventstore.get_event_store()
    appends: list[int] = []
    unstored_when_sent: list[str] = []
    append_many = store.append_many

    async def counted(stream_id: str, burst: Any, owner: Any = None) -> bool:
        appends.append(len(burst))
        return await append_many(stream_id, burst, owner)

    send_body = writer.send_body

    async def checked(send: Any, body: bytes, *, more_body: bool = False) -> None:
        for event_id, message in events(body):
            stream, sequence = event_id.rsplit(".", 1)
            if message is not None:  # the priming event carries no data and is not stored
                kept = dict(await store.after(stream, int(sequence) - 1))
                if kept.get(int(sequence)) != message:
                    unstored_when_sent.append(event_id)
        await send_body(send, body, more_body=more_body)

    monkeypatch.setattr(store, "append_many", counted)
    monkeypatch.setattr(writer, "send_body", checked)
    reply = await call(access, rpc("tools/call", progress(5), id=4), headers={"mcp-session-id": session_id})
    found = events(reply.body)
    assert len(found) == 7  # priming, five steps, the answer
    assert unstored_when_sent == []
    # The burst is stored in batches (one Redis round trip each), not one call per event: the stream opens at once
    # for a progress token, so the answer may follow the progress burst in a call of its own.
    assert sum(appends) == 6 and len(appends) <= 2, appends


async def test_a_resumed_stream_gets_every_event_after_the_id_it_names(access: Any) -> None:
    session_id = await open_session(access)
    reply = await call(access, rpc("tools/call", progress(4), id=5), headers={"mcp-session-id": session_id})
    found = events(reply.body)
    assert len(found) == 6
    for position, (event_id, _) in enumerate(found[:-1]):
        resumed = await call(
            access,
            method="GET",
            headers={"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": event_id},
        )
        assert resumed.status == 200
        assert events(resumed.body) == [event for event in found[position + 1 :] if event[1] is not None]


async def test_a_store_failing_mid_stream_sends_no_unkept_event_and_ends_with_an_error(
    access: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = await open_session(access)
    store = eventstore.get_event_store()
    append_many = store.append_many
    appends = 0

    async def goes_away(stream_id: str, burst: Any, owner: Any = None) -> bool:
        nonlocal appends
        appends += 1
        if appends == 1:  # the first step's burst is kept: the stream has started
            return await append_many(stream_id, burst, owner)
        raise ConnectionError("the store went away")

    monkeypatch.setattr(store, "append_many", goes_away)
    # A pause before each step: each step is a burst of its own.
    reply = await call(access, rpc("tools/call", progress(3, 30), id=6), headers={"mcp-session-id": session_id})
    assert reply.status == 200
    sent = [orjson.loads(line[6:]) for line in reply.body.decode().splitlines() if line.startswith("data: {")]
    progressed = [message["params"]["progress"] for message in sent if message.get("method")]
    assert progressed == [1]  # the kept step only, no unkept one
    assert sent[-1]["id"] == 6 and sent[-1]["error"]["code"] == -32603


async def test_the_first_burst_is_the_store_check(access: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    session_id = await open_session(access)
    store = eventstore.get_event_store()
    checks: list[str] = []
    append_many = store.append_many
    appends: list[int] = []

    async def check() -> None:
        checks.append("check")

    async def counted(stream_id: str, burst: Any, owner: Any = None) -> bool:
        appends.append(len(burst))
        return await append_many(stream_id, burst, owner)

    monkeypatch.setattr(store, "check", check)
    monkeypatch.setattr(store, "append_many", counted)
    reply = await call(access, rpc("tools/call", progress(5), id=8), headers={"mcp-session-id": session_id})
    assert reply.status == 200 and (reply.content_type or "").startswith("text/event-stream")
    found = events(reply.body)
    assert found[0][1] is None and found[0][0].endswith(".0")  # the priming event first
    assert len(found) == 7
    assert checks == [] and sum(appends) == 6 and len(appends) <= 2, (checks, appends)


async def test_a_store_down_at_the_first_burst_is_a_503_before_any_byte(
    access: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = await open_session(access)
    store = eventstore.get_event_store()

    async def down(*_args: Any, **_kwargs: Any) -> Any:
        raise ConnectionError("the store is down")

    monkeypatch.setattr(store, "append_many", down)
    monkeypatch.setattr(store, "check", down)
    messages = await raw_response(access, rpc("tools/call", progress(3), id=9), headers={"mcp-session-id": session_id})
    assert [message["type"] for message in messages] == ["http.response.start", "http.response.body"]
    head = dict(messages[0]["headers"])
    assert messages[0]["status"] == 503 and int(head[b"retry-after"]) >= 1
    assert head[b"content-type"] == b"application/json"
    answer = orjson.loads(messages[1]["body"])
    assert answer["id"] == 9 and answer["error"]["code"] == -32603


async def test_on_redis_a_session_stream_takes_one_round_trip_per_burst(
    access: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_redis()
    assert isinstance(eventstore.get_event_store(), eventstore.RedisEventStore)
    session_id = await open_session(access)
    # The cancellation watch (its group join and mark check) starts after the quick call has ended.
    monkeypatch.setattr(cancellation, "CANCEL_WATCH_DELAY_SECONDS", 60.0)
    assert backchannel.cancellation.CANCEL_WATCH_DELAY_SECONDS == 60.0
    headers = {"mcp-session-id": session_id}
    await call(access, rpc("tools/call", progress(5), id=10), headers=headers)  # the append's script is loaded
    trips = RedisRoundTrips(monkeypatch)
    reply = await call(access, rpc("tools/call", progress(5), id=11), headers=headers)
    assert reply.status == 200 and len(events(reply.body)) == 7
    # The burst's append, a pipeline of one here (the answer may follow in one of its own), and no PING before the
    # head; besides them only the rate limit's script (EVALSHA).
    assert "PING" not in trips.sent and 1 <= trips.sent.count("PIPELINE") <= 2, trips.sent
    assert set(trips.sent) <= {"PIPELINE", "EVALSHA"}, trips.sent
