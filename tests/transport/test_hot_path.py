"""The hot path of a plain POST: what a warm ``tools/call`` costs the event loop and the channel layer.

A call that nobody can reach from elsewhere (a quick ``async_echo``, stateless, on a session, or 2026-07-28)
creates no channel-layer channel and joins no group (no ``await_many_dispatch``, which made a task per source and
per message). A call without a session runs in the application's own task and makes no other; one on a session
(whose stream may outlive its client) runs with two: the work and one pending ``receive()`` that hears
``http.disconnect``. An idle GET stream holds no ``asyncio.Queue`` of mcp_app's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from channels.layers import get_channel_layer

from mcp_app.limits import rates
from tests.helpers import call, open_session, tool_call
from tests.request_path import caches_ready


@contextmanager
def tasks_created() -> Iterator[list[str]]:
    """The qualified names of the coroutines of every task created on this loop while inside."""
    loop = asyncio.get_running_loop()
    names: list[str] = []
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        names.append(getattr(coro, "__qualname__", type(coro).__name__))
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        yield names
    finally:
        loop.set_task_factory(previous)


@contextmanager
def layer_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every subscription-side call made on the process's channel layer while inside."""
    layer = get_channel_layer()
    assert layer is not None
    calls: list[str] = []
    for name in ("new_channel", "group_add", "group_discard", "receive"):
        original = getattr(layer, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(layer, name, counted)
    yield calls


@pytest.mark.parametrize("mode", ["stateless", "session", "modern"])
async def test_a_warm_plain_call_subscribes_to_nothing_and_runs_in_the_application_task(
    mode: str, make_access: Callable[..., Awaitable[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    access = await make_access(tools=("async_echo",))
    await caches_ready()
    extra: dict[str, str] = {}
    if mode == "session":
        extra["mcp-session-id"] = await open_session(access, initialized=True)
    body, headers = tool_call(mode, "async_echo", "hot")
    assert (await call(access, body, headers={**headers, **extra})).status == 200  # warm the caches
    with layer_calls(monkeypatch) as subscribed, tasks_created() as created:
        reply = await call(access, body, headers={**headers, **extra})
    assert reply.status == 200
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "hot"}]
    assert subscribed == []
    # The application itself (the communicator starts it); on a session also the work and the pending receive().
    # Before: three for every call, and five before that (two receive()/inbox waits for the body, one more after
    # it, and a sleeping cancellation watcher).
    expected = ["ProtocolTypeRouter.__call__"]
    if mode == "session":
        expected += ["McpConsumer._serve", "Queue.get"]
    if isinstance(rates.get_rates(), rates.RedisRates):
        # The rate buckets' one Redis round trip: redis-py sends under its socket timeout (asyncio.wait_for, a task).
        expected.append("AbstractConnection._send_packed_command")
    assert sorted(created) == sorted(expected)


async def test_an_idle_get_stream_makes_no_queue_of_its_own(
    make_access: Callable[..., Awaitable[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``asyncio.Queue`` is ~3.4 KiB: an idle GET stream (the 30 KiB target of issue 8) has none of mcp_app's
    (before: two, the consumer's event queue and the resumed-stream queue). The layer's and daphne's are theirs."""
    import sys

    from tests.helpers import communicator

    access = await make_access(tools=("async_echo",))
    session_id = await open_session(access, initialized=True)
    comm = communicator(access, method="GET", headers={"accept": "text/event-stream", "mcp-session-id": session_id})
    made_by: list[str] = []
    original = asyncio.Queue.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        made_by.append(sys._getframe(1).f_globals.get("__name__", "?"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.Queue, "__init__", counted)
    await comm.send_input({"type": "http.request", "body": b""})
    assert (await comm.receive_output(timeout=5))["status"] == 200
    body = b""
    while b": ready" not in body:
        body += (await comm.receive_output(timeout=5))["body"]
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=5)
    assert [name for name in made_by if name.startswith("mcp_app")] == []
