"""Sync tools run with Django's connection hygiene: stale or broken connections of the worker thread are closed
before and after the call (``close_old_connections``), as Django does around a request."""

from __future__ import annotations

import threading

import mcp_app.runtime.invocation as invocation
from mcp_app.runtime.invocation import run_sync


async def test_a_sync_tool_runs_between_close_old_connections_in_its_own_thread(monkeypatch):
    cleaned: list[int] = []
    original = invocation.close_old_connections

    def recording() -> None:
        cleaned.append(threading.get_ident())
        original()

    monkeypatch.setattr(invocation, "close_old_connections", recording)

    def tool(text: str) -> tuple[str, int]:
        return text, threading.get_ident()

    text, thread = await run_sync(tool, text="x")
    assert text == "x"
    assert thread != threading.get_ident()  # a worker thread, not the event loop's
    assert cleaned == [thread, thread]  # before and after, in that thread
