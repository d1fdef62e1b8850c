"""kill -9 of a real daphne, then a fresh process on the same database (and Redis, when configured):

- a durable task that was ``working`` in the dead process is ``failed`` as soon as the new process has started
  (not ``working`` until its TTL);
- a GET with the ``Last-Event-ID`` of a POST stream whose producer died gets its headers and first bytes at once,
  what the store kept (on Redis), and an end within ``SSE_RESUME_IDLE_SECONDS``: it never hangs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import KEEPALIVE_SECONDS, daphne_command, database_url, free_port, wait_for_port
from tests.helpers import endpoint, initialize, modern_body, routing_headers
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

RESUME_IDLE_SECONDS = 1.5
WAIT = 10.0
TASKS = "io.modelcontextprotocol/tasks"


@pytest.fixture
def launch(transactional_db: None, tmp_path: Path) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], str]]]:
    """Start daphne processes on the test database; each is stopped (or already dead) at the end."""
    from django.conf import settings
    from django.db import connection

    started: list[subprocess.Popen[bytes]] = []

    def start() -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        env = {
            **{
                k: v
                for k, v in os.environ.items()
                if k not in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH", "REDIS_URL", "MCP_LIVENESS_SWEEP")
            },
            "DJANGO_SETTINGS_MODULE": "mcp_host.settings",
            "DATABASE_URL": database_url(connection.settings_dict),
            "MCP_SSE_KEEPALIVE_SECONDS": KEEPALIVE_SECONDS,
            "MCP_SSE_RESUME_IDLE_SECONDS": str(RESUME_IDLE_SECONDS),
            "PYTHONUNBUFFERED": "1",
        }
        if settings.REDIS_URL:
            env["REDIS_URL"] = settings.REDIS_URL
        log = (tmp_path / f"daphne-{len(started)}.log").open("wb")
        process = subprocess.Popen(daphne_command(port), cwd=settings.BASE_DIR, env=env, stdout=log, stderr=log)
        started.append(process)
        wait_for_port(port, process, "daphne")
        return process, f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                process.kill()


def _task_call(seconds: int) -> tuple[dict[str, Any], dict[str, str]]:
    body = modern_body(
        "tools/call",
        {"name": "slow_compute", "arguments": {"seconds": seconds, "label": "crash"}},
        id="task-1",
        capabilities={"extensions": {TASKS: {}}},
    )
    return body, routing_headers(body)


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
    body, task_headers = _task_call(600)
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
