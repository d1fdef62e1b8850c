"""A served request leaves nothing to the garbage collector: reference counting frees its consumer at its end.

Under load every request's consumer, membership, exchange and writer left in reference cycles made the full
collections grow with the load, and the heap hold them between collections.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mcp_app.transport.consumer import McpConsumer
from tests.helpers import call, open_session, rpc

PROGRESS = {"name": "progress_demo", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The collector off while the test runs: what it would have freed is still there for ``garbage``."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        garbage()
        gc.enable()


def garbage() -> list[object]:
    """What a collection finds unreachable now (freed once returned)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_a_session_call_with_a_stream_leaves_no_consumer_in_a_cycle(access, no_collector):
    session_id = await open_session(access)
    reply = await call(access, rpc("tools/call", PROGRESS, id=1), headers={"mcp-session-id": session_id})
    assert reply.status == 200 and b"Completed 2 steps." in reply.body
    assert not [item for item in garbage() if isinstance(item, McpConsumer)]


async def test_a_call_without_a_session_leaves_no_consumer_in_a_cycle(access, no_collector):
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=1))
    assert reply.status == 200
    assert not [item for item in garbage() if isinstance(item, McpConsumer)]
