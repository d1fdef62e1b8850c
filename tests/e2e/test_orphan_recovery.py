"""Orphan recovery by lease, periodically: a durable task whose process was SIGKILLed is failed (not left
``working`` until its TTL) even when

- the process was restarted at once, before anyone reaped the dead one (``kill(pid, 0)`` still succeeds for a
  zombie: the old check took it for alive, and recovery ran only at start-up);
- the process died while another one was already running (recovery is periodic, not only at start-up).

On the embedded default the dead process is judged by its pid (a zombie counts as dead); with Redis also by its
heartbeat (``mcp_app.heartbeat``).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import TASKS, endpoint, modern_body, routing_headers, task_call
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

BOUND_SECONDS = 15.0

Launch = Callable[[], tuple[subprocess.Popen[bytes], str]]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


async def _start_task(http: httpx.AsyncClient, url: str, access: Any) -> str:
    body, task_headers = task_call(600)
    created = await http.post(endpoint(url, access), json=body, headers={**headers(access), **task_headers})
    assert created.status_code == 200, created.text[:300]
    assert created.json()["result"]["status"] == "working"
    return str(created.json()["result"]["taskId"])


def _kill_unreaped(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL, and leave the dead process unreaped (a zombie) for now, as a slow supervisor would."""
    process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + BOUND_SECONDS
    while _state(process.pid) != "Z":
        assert time.monotonic() < deadline, _state(process.pid)
        time.sleep(0.01)


async def _until_failed(http: httpx.AsyncClient, url: str, access: Any, task_id: str) -> tuple[dict[str, Any], float]:
    get_task = modern_body("tasks/get", {"taskId": task_id}, id="get", capabilities={"extensions": {TASKS: {}}})
    started = time.monotonic()
    while True:
        reply = await http.post(
            endpoint(url, access), json=get_task, headers={**headers(access), **routing_headers(get_task)}
        )
        task = reply.json()["result"]
        if task["status"] != "working" or time.monotonic() - started > BOUND_SECONDS:
            return task, time.monotonic() - started
        await asyncio.sleep(0.2)


@pytest.fixture
async def access(transactional_db: None, access_factory: Any) -> Any:
    from channels.db import database_sync_to_async

    return await database_sync_to_async(access_factory)(tools=("slow_compute",))


async def test_a_task_of_a_process_killed_and_restarted_at_once_is_recovered(launch: Launch, access: Any) -> None:
    first, first_url = launch()
    async with httpx.AsyncClient(timeout=BOUND_SECONDS) as http:
        task_id = await _start_task(http, first_url, access)
        _kill_unreaped(first)
        _second, second_url = launch()
        assert _state(first.pid) == "Z"  # still unreaped when the new process started and recovered
        task, after = await _until_failed(http, second_url, access, task_id)
    first.wait(timeout=BOUND_SECONDS)
    assert task["status"] == "failed", (task, after)
    assert "stopped" in task["statusMessage"]


async def test_a_task_of_a_process_that_dies_while_another_runs_is_recovered(launch: Launch, access: Any) -> None:
    first, first_url = launch()
    _second, second_url = launch()  # started before the first dies: only a periodic recovery can see it
    async with httpx.AsyncClient(timeout=BOUND_SECONDS) as http:
        task_id = await _start_task(http, first_url, access)
        _kill_unreaped(first)
        task, after = await _until_failed(http, second_url, access, task_id)
    first.wait(timeout=BOUND_SECONDS)
    assert task["status"] == "failed", (task, after)
    assert after <= BOUND_SECONDS
