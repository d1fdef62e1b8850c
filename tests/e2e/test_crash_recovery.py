"""kill -9 of a real daphne, then a fresh process on the same database (and Redis, when configured):

- a durable task that was ``working`` in the dead process is ``failed`` as soon as the new process has started
  (not ``working`` until its TTL);
- a GET with the ``Last-Event-ID`` of a POST stream whose producer died gets its headers and first bytes at once,
  what the store kept (on Redis), and an end within ``SSE_RESUME_IDLE_SECONDS``: it never hangs.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RESUME_IDLE_SECONDS
from tests.helpers import TASKS, endpoint, initialize, modern_body, routing_headers, task_call
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

WAIT = 10.0


async def test_a_killed_process_leaves_no_working_task_and_no_hanging_resume(
    launch: Callable[[], tuple[subprocess.Popen[bytes], str]],
    transactional_db: None,
    access_factory: Any,
    tool_factory: Any,
) -> None:
    from channels.db import database_sync_to_async

    access = await database_sync_to_async(access_factory)(tools=("slow_compute",))
    await database_sync_to_async(tool_factory)(
        access.server,
        "slow_static",
        static_result={"content": [{"type": "text", "text": "late"}]},
        static_delay_ms=600_000,
        static_progress_steps=600,
    )
    first, first_url = launch()
    body, task_headers = task_call(600)
    async with httpx.AsyncClient(timeout=WAIT) as http:
        created = await http.post(endpoint(first_url, access), json=body, headers={**headers(access), **task_headers})
        assert created.status_code == 200, created.text[:300]
        task_id = created.json()["result"]["taskId"]
        assert created.json()["result"]["status"] == "working"

        opened = await http.post(endpoint(first_url, access), json=initialize({}), headers=headers(access))
        on_session = headers(
            access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        )
        slow = {
            "jsonrpc": "2.0",
            "id": "slow-1",
            "method": "tools/call",
            "params": {"name": "slow_static", "_meta": {"progressToken": "p"}},
        }
        event_ids: list[str] = []
        async with http.stream("POST", endpoint(first_url, access), json=slow, headers=on_session) as stream:
            async with asyncio.timeout(WAIT):
                async for line in stream.aiter_lines():
                    if line.startswith("id: "):
                        event_ids.append(line[4:])
                    if len(event_ids) >= 2:  # the priming event and a first progress event
                        break
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=WAIT)

        _second, second_url = launch()
        get_task = modern_body("tasks/get", {"taskId": task_id}, id="get-1", capabilities={"extensions": {TASKS: {}}})
        polled = await http.post(
            endpoint(second_url, access), json=get_task, headers={**headers(access), **routing_headers(get_task)}
        )

        resume_headers = {**on_session, "Accept": "text/event-stream", "Last-Event-ID": event_ids[0]}
        started = time.monotonic()
        async with http.stream("GET", endpoint(second_url, access), headers=resume_headers) as resumed:
            headers_after = time.monotonic() - started
            status = resumed.status_code
            chunks = resumed.aiter_raw()
            first_bytes = await asyncio.wait_for(anext(chunks), timeout=1.0)
            async with asyncio.timeout(RESUME_IDLE_SECONDS + WAIT):
                rest = b"".join([chunk async for chunk in chunks])
            ended_after = time.monotonic() - started

    assert polled.status_code == 200, polled.text[:300]
    task = polled.json()["result"]
    assert task["status"] == "failed", task
    assert "stopped" in task["statusMessage"]
    assert status == 200
    assert headers_after < 1.0
    assert first_bytes.startswith(b": resumed")
    assert ended_after < RESUME_IDLE_SECONDS + 3.0
    from django.conf import settings

    if settings.REDIS_URL:  # the shared store kept the events the dead process had sent
        assert f"id: {event_ids[1]}".encode() in rest or event_ids[1].encode() in first_bytes + rest
