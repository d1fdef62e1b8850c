"""Real Celery workers for the end-to-end tests: ``celery -A mcp_host worker`` as a subprocess.

``running_worker`` starts one against the test database and the test Redis (the same environment as the
test daphne: ``tests.e2e.daphne_settings``, which registers the test-only tools), waits (bounded) until it
reports ready, and stops it after (SIGTERM, then SIGKILL). Without Redis there is no broker: the tests that
need a worker skip, or fail under ``MCP_REQUIRE_SERVICES=1`` (CI). ``WORKER_TEST_QUEUE`` is purged before a
worker starts, so a message left by an earlier test never reaches it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_SERVICES

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
