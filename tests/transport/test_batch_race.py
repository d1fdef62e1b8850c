"""A batch of progress calls on a resumable session: concurrent notifications start the SSE response once.

``ResponseWriter.start()`` awaits the event store's check (a Redis round trip) before the first byte; every call of
the batch that notifies during that wait must join the same start, not start the response again.
"""

from __future__ import annotations

from tests.conftest import require_redis
from tests.helpers import call, events, open_session, rpc


def progress(token: str, request_id: int) -> dict:
    params = {"name": "progress_demo", "arguments": {"steps": 2}, "_meta": {"progressToken": token}}
    return rpc("tools/call", params, id=request_id)


async def test_a_batch_of_progress_calls_on_a_session_answers_every_call(access):
    from mcp_app.transport.eventstore import RedisEventStore, get_event_store

    require_redis()
    assert isinstance(get_event_store(), RedisEventStore)  # the store whose check really waits
    session_id = await open_session(access, "2025-03-26")
    batch = [progress(f"t{n}", n) for n in range(1, 6)]
    reply = await call(
        access, batch, headers={"mcp-session-id": session_id, "mcp-protocol-version": "2025-03-26"}, timeout=10
    )
    assert reply.status == 200
    assert reply.content_type.startswith("text/event-stream")
    found = [message for _, message in events(reply.body)]
    answers = [message for message in found if isinstance(message, list)]
    assert len(answers) == 1, reply.body
    assert sorted(item["id"] for item in answers[0]) == [1, 2, 3, 4, 5]
    assert all("result" in item and not item["result"].get("isError") for item in answers[0]), answers
    progress_tokens = {m["params"]["progressToken"] for m in found if isinstance(m, dict) and "method" in m}
    assert progress_tokens == {"t1", "t2", "t3", "t4", "t5"}
