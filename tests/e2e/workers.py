"""Real Celery workers for the end-to-end tests: ``celery -A mcp_host worker`` as a subprocess.

``running_worker`` starts one against the test database and the test Redis (the same environment as the
test daphne: ``tests.e2e.daphne_settings``, which registers the test-only tools), waits (bounded) until it
reports ready, and stops it after (SIGTERM, then SIGKILL). Without Redis there is no broker: the tests that
need a worker skip, or fail under ``MCP_REQUIRE_SERVICES=1`` (CI). ``WORKER_TEST_QUEUE`` is purged before a
worker starts, so a message left by an earlier test never reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REQUIRE_SERVICES
from tests.helpers import modern_body, routing_headers

READY_TIMEOUT_SECONDS = 60.0  # a bound, not a wait (start-up on a loaded machine)
STOP_TIMEOUT_SECONDS = 15.0


def require_broker() -> str:
    from django.conf import settings

    if not settings.REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not set: the worker tests need a broker")
        pytest.skip("worker tests need REDIS_URL (a broker for a real Celery worker)")
    return str(settings.REDIS_URL)


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _purge(env: dict[str, str], queue: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "celery", "-A", "mcp_host", "purge", "-f", *(["-Q", queue] if queue else [])],
        env=env,
        check=True,
        capture_output=True,
        timeout=30,
    )


@contextlib.contextmanager
def running_worker(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    concurrency: int = 4,
    pool: str = "prefork",
    extra_env: dict[str, str] | None = None,
    purge: bool = True,
    queue: str = "",
) -> Iterator[Worker]:
    """``queue``: consume only that queue (daphne then needs ``MCP_WORKER_QUEUE`` set to it)."""
    from django.conf import settings
    from django.db import connection

    from tests.e2e.conftest import database_url

    redis_url = require_broker()
    env = {**os.environ}
    for stale in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH", "MCP_INVALIDATION"):
        env.pop(stale, None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.e2e.daphne_settings",
            "DATABASE_URL": database_url(connection.settings_dict),
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra_env or {})
    if purge:
        _purge(env, queue)
    logs = tmp_path_factory.mktemp("worker")
    log_path = logs / "worker.log"
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "mcp_host",
        "worker",
        "--loglevel",
        "INFO",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--without-gossip",
        "--without-mingle",
        "--hostname",
        f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
        *(["-Q", queue] if queue else []),
    ]
    with log_path.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    worker = Worker(process=process, log_path=log_path)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while " ready." not in worker.log():
            if time.monotonic() >= deadline:
                pytest.fail(f"the Celery worker was not ready in {READY_TIMEOUT_SECONDS}s:\n{worker.log()}")
            try:
                code = process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"the Celery worker exited with status {code} before it was ready:\n{worker.log()}")
        yield worker
    finally:
        stop(worker)


def stop(worker: Worker) -> None:
    if worker.process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.process.pid, signal.SIGTERM)
    try:
        worker.process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=STOP_TIMEOUT_SECONDS)


# What the worker tests share (test_workers, test_worker_liveness, test_worker_loss, test_tracing) ----------------

WAIT = 20.0  # the bound of every wait of the worker tests


QUIET_SECONDS = 1.5  # above AUDIT_FLUSH_INTERVAL_SECONDS (1 s): daphne's audit flusher has written what it holds


def quiesce() -> None:
    """Before the test database is flushed: let the other processes finish writing (settled records, the audit
    rows of the calls), else the flush's TRUNCATE and their INSERTs deadlock and the flush fails. Bounded."""
    from mcp_app.models import ToolCall, ToolTask

    deadline = time.monotonic() + WAIT
    while ToolTask.objects.filter(status__in=("queued", "working")).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    count, stable_since = ToolCall.objects.count(), time.monotonic()
    while time.monotonic() - stable_since < QUIET_SECONDS and time.monotonic() < deadline:
        time.sleep(0.1)
        now = ToolCall.objects.count()
        if now != count:
            count, stable_since = now, time.monotonic()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def wait_for_line(path: Path, predicate: Any, what: str) -> list[str]:
    """Wait (bounded) until a line of the trace satisfies ``predicate``; returns the trace."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = lines(path)
        if any(predicate(line) for line in found):
            return found
        await asyncio.sleep(0.02)
    pytest.fail(f"the trace never showed {what}: {lines(path)}")


async def orm(function: Any, *args: Any, **kwargs: Any) -> Any:
    from asgiref.sync import sync_to_async

    return await sync_to_async(function, thread_sensitive=True)(*args, **kwargs)


def job(trace: Path, tag: str, steps: int, interval_ms: int = 0, **extra: Any) -> dict[str, Any]:
    return {"path": str(trace), "tag": tag, "steps": steps, "interval_ms": interval_ms, **extra}


def modern_tool_call(
    name: str, arguments: dict[str, Any], *, id: Any = 1, meta: dict[str, Any] | None = None, **kw: Any
):
    body = modern_body("tools/call", {"name": name, "arguments": arguments}, id=id, **kw)
    body["params"]["_meta"].update(meta or {})
    return body, routing_headers(body)
