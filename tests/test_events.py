"""The typed events of the transport on the channel layer: each through its one ``to_wire``/``from_wire``, the
shape an older process sent (no ``version``) read the same, a message of another kind or with fields that do not
fit never taken for one."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcp_app.events import Broadcast, CallCancelled, Reply, StreamEvent


def wire(message: dict[str, Any]) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(message))


@pytest.mark.parametrize(
    ("event", "older"),
    [
        (
            Broadcast({"method": "notifications/tools/list_changed"}),
            {"message": {"method": "notifications/tools/list_changed"}},
        ),
        (Reply("7", {"result": {"ok": True}}), {"id": "7", "answer": {"result": {"ok": True}}}),
        (CallCancelled(), {}),
        (
            StreamEvent(3, {"jsonrpc": "2.0", "id": 1, "result": {}}),
            {"sequence": 3, "message": {"jsonrpc": "2.0", "id": 1, "result": {}}},
        ),
    ],
)
def test_an_event_round_trips_and_its_older_shape_is_read_the_same(event: Any, older: dict[str, Any]) -> None:
    sent = wire(event.to_wire())
    assert sent["type"] == event.KIND and sent["version"] == 1
    assert type(event).from_wire(sent) == type(event).from_wire({"type": event.KIND, **older}) == event


def test_no_event_is_taken_for_another_kind() -> None:
    kinds = (Broadcast, Reply, CallCancelled, StreamEvent)
    samples = (Broadcast({}), Reply("1", {}), CallCancelled(), StreamEvent(1, None))
    for kind in kinds:
        for sample in samples:
            assert (kind.from_wire(sample.to_wire()) is not None) == isinstance(sample, kind)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "mcp.broadcast", "message": "not an object"},
        {"type": "mcp.broadcast"},
        {"type": "mcp.reply", "id": "1", "answer": ["no"]},
        {"type": "mcp.reply", "answer": {}},
        {"type": "mcp.stream_event", "sequence": "3", "message": {}},
        {"type": "mcp.stream_event", "sequence": True, "message": {}},
    ],
)
def test_a_malformed_event_is_dropped(body: dict[str, Any]) -> None:
    kind = {"mcp.broadcast": Broadcast, "mcp.reply": Reply, "mcp.stream_event": StreamEvent}[body["type"]]
    assert kind.from_wire(body) is None
