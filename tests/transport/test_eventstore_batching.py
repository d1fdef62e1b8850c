"""``RedisEventStore`` on a real Redis: the appends that streams make in one turn of the event loop go in one
pipeline, and each still answers for itself (stored, over its owner's bound, or the store's failure)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from mcp_app.channel_layer import LAYER_ERRORS
from mcp_app.transport.eventstore import RedisEventStore
from tests.conftest import require_redis
from tests.helpers import RedisRoundTrips

pytestmark = pytest.mark.services

HUNDRED_KB = "x" * 100_000


@pytest.fixture
def store(settings: Any) -> RedisEventStore:
    """A store of the test's own keys, its agents held to 150 kB of events per window."""
    settings.MCP_APP = {**settings.MCP_APP, "EVENT_STORE_MAX_BYTES_PER_AGENT": 150_000}
    return RedisEventStore(require_redis(), prefix=f"test-batch-{uuid.uuid4().hex[:8]}")


async def test_appends_of_one_turn_are_one_round_trip_and_each_answers_for_itself(
    store: RedisEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.append_many("warm", [(1, {"n": 0})])  # connected, and the script loaded
    trips = RedisRoundTrips(monkeypatch)
    stored = await asyncio.gather(
        *(store.append_many(f"s{n}", [(1, {"n": n}), (2, {"n": n})], owner=(1, 10 + n)) for n in range(5)),
        store.append_many("big-1", [(1, {"message": HUNDRED_KB})], owner=(2, 20)),
        store.append_many("big-2", [(1, {"message": HUNDRED_KB})], owner=(2, 20)),  # its agent is over the bound
    )
    assert trips.sent == ["PIPELINE"]
    assert stored == [True] * 6 + [False]  # in the order they were made
    for n in range(5):
        assert await store.after(f"s{n}", 0) == [(1, {"n": n}), (2, {"n": n})]
    assert await store.after("big-2", 0) == []


async def test_an_append_made_while_a_batch_is_under_way_goes_in_the_next_one(store: RedisEventStore) -> None:
    first = asyncio.ensure_future(store.append_many("a", [(1, {"n": 1})]))
    await asyncio.sleep(0)  # the first batch is sent: this append waits for no answer of it
    assert await store.append_many("b", [(1, {"n": 2})])
    assert await first
    assert await store.after("a", 0) == [(1, {"n": 1})] and await store.after("b", 0) == [(1, {"n": 2})]


async def test_an_unreachable_store_fails_every_append_of_the_batch() -> None:
    store = RedisEventStore("redis://127.0.0.1:1/0", prefix="unreachable")
    results = await asyncio.gather(
        store.append_many("a", [(1, {"n": 1})]), store.append_many("b", [(1, {"n": 2})]), return_exceptions=True
    )
    assert all(isinstance(result, LAYER_ERRORS) for result in results), results
