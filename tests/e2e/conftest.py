"""A real daphne process serving ``mcp_host.asgi:application`` for the end-to-end tests.

``daphne`` starts one daphne per test session on a free 127.0.0.1 port, pointed at the test database that
pytest-django created (the SQLite file or the PostgreSQL ``test_…`` database) and at the same Redis, with
short SSE keep-alives so that stream tests finish quickly. Tests write rows through ``transactional_db`` so
that they are committed and visible to the other process. The process is stopped at session end, before
pytest-django drops the test database (the fixture depends on ``django_db_setup``, so it is torn down first).

Not owned here: the domain factories (``tests/conftest.py``) and anything about a particular endpoint.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import REQUIRE_SERVICES, Access
from tests.helpers import close_connections_of_async_threads  # noqa: F401  (same clean-up here)

# A bound, not a wait (start-up on a loaded 2-core machine can pass 20 s); MCP_E2E_READY_TIMEOUT_SECONDS sets it.
READY_TIMEOUT_SECONDS = float(os.environ.get("MCP_E2E_READY_TIMEOUT_SECONDS") or 60.0)
STOP_TIMEOUT_SECONDS = 10.0
KEEPALIVE_SECONDS = "0.2"
# The Celery queue of this test session's worker calls: another test run on the same Redis never takes them.
SESSION_QUEUE = f"tests-{os.getpid()}"
# How soon a change reaches every process (tests of invalidation across processes), and the call that shows it.
BOUND_SECONDS = 1.0
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL naming the database this test process uses (after pytest-django renamed it)."""
    engine = settings_dict["ENGINE"]
    name = str(settings_dict["NAME"])
    if engine == "django.db.backends.sqlite3":
        if name == ":memory:" or name.startswith("file:"):
            raise RuntimeError("e2e tests need a file-backed SQLite test database that daphne can open")
        return f"sqlite:///{Path(name).resolve()}"
    if engine in ("django.db.backends.postgresql", "mcp_app.database"):
        user = quote(settings_dict.get("USER") or "", safe="")
        password = quote(settings_dict.get("PASSWORD") or "", safe="")
        credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = settings_dict.get("HOST") or ""
        port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
        return f"postgres://{credentials}{host}{port}/{quote(name, safe='')}"
    raise RuntimeError(f"e2e tests do not know how to hand database engine {engine!r} to daphne")


# daphne's listen backlog, as ``make run`` and docs/deployment.md set it: Twisted's default of 50 overflows when
# 200 clients connect at once (test_200_concurrent_worker_calls_all_complete_exactly_once), and the kernel then
# drops their handshakes (TcpExtListenOverflows); it is capped by net.core.somaxconn.
LISTEN_BACKLOG = 1024


def daphne_command(port: int) -> list[str]:
    daphne = Path(sys.executable).with_name("daphne")
    launcher = [str(daphne)] if daphne.exists() else [sys.executable, "-m", "daphne"]
    listen = f"tcp:port={port}:interface=127.0.0.1:backlog={LISTEN_BACKLOG}"
    return [*launcher, "-e", listen, "-v", "1", "mcp_host.asgi:application"]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    """Wait (bounded) until ``process`` listens on ``port``; fail the test if it exits or the bound passes."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not port_open(port):
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} did not listen on {port}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = process.wait(timeout=0.05)
            pytest.fail(f"{what} exited with {code} before listening")


class OwnRedis:
    """A private redis-server that the test may stop and start on the same port."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if REQUIRE_SERVICES:
                pytest.fail("redis-server is needed for the outage test")
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.port = free_port()
        self.tmp = tmp
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *options: str) -> None:
        """Start (or restart) the server; ``options`` are more ``redis-server`` arguments (``--maxclients``, 50)."""
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += options
        self.process = subprocess.Popen(
            [*args, "--dir", str(self.tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port(self.port, self.process, "redis-server")

    def clients(self) -> int:
        """How many clients are connected (``INFO clients``), this question's own connection excluded."""
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=5.0)
        try:
            return int(client.info("clients")["connected_clients"]) - 1
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
            self.process = None


@dataclass
class Daphne:
    """The running server: its base URL and where its output goes (for failure messages)."""

    url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def _limit_nofile(soft: int) -> None:
    """In a forked child before exec: lower its soft descriptor limit (the hard limit stays)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def running_daphne(
    tmp_path_factory: pytest.TempPathFactory, extra_env: dict[str, str] | None = None, *, nofile: int | None = None
) -> Iterator[Daphne]:
    """Start daphne on a free port against the test database (and Redis, when configured); stop it after
    (SIGTERM, as a process manager does).

    ``extra_env`` is applied last (e.g. another ``REDIS_URL``, ``MCP_LOG_FORMAT``). ``nofile``: daphne's soft
    ``RLIMIT_NOFILE`` (``ulimit -n``), set in the child only: this process may hold more descriptors than that."""
    from django.conf import settings
    from django.db import connection

    port = free_port()
    env = {**os.environ}
    for stale in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH", "REDIS_URL", "MCP_INVALIDATION", "MCP_LIVENESS_SWEEP"):
        env.pop(stale, None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.e2e.daphne_settings",
            "DATABASE_URL": database_url(connection.settings_dict),
            "MCP_SSE_KEEPALIVE_SECONDS": KEEPALIVE_SECONDS,
            "PYTHONUNBUFFERED": "1",
            # Worker calls of this test session go to a queue of its own (see ``celery_worker``).
            "MCP_WORKER_QUEUE": SESSION_QUEUE,
        }
    )
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    else:
        # Several processes without Redis follow cache invalidations through the shared database.
        env["MCP_INVALIDATION"] = "database"
    env.update(extra_env or {})
    logs = tmp_path_factory.mktemp("daphne")
    stdout_path, stderr_path = logs / "stdout.log", logs / "stderr.log"
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            daphne_command(port),
            cwd=settings.BASE_DIR,
            env=env,
            stdout=stdout,
            stderr=stderr,
            preexec_fn=None if nofile is None else functools.partial(_limit_nofile, nofile),
        )
    server = Daphne(url=f"http://127.0.0.1:{port}", process=process, stderr_path=stderr_path)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not port_open(port):
            if time.monotonic() >= deadline:
                pytest.fail(f"daphne did not listen on port {port} in {READY_TIMEOUT_SECONDS}s:\n{server.stderr()}")
            try:
                # Waiting on the process doubles as the poll interval and notices an early exit at once.
                code = process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"daphne exited with status {code} before listening:\n{server.stderr()}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_SECONDS)


@pytest.fixture(autouse=True)
def _publish_where_daphne_follows(settings: Any, use_backend: Any) -> None:
    """Changes this test process makes through the ORM must reach the daphne processes' caches: without Redis
    they follow the database log (see ``running_daphne``), so this process publishes there too."""
    from mcp_app import invalidation

    if not settings.REDIS_URL:
        use_backend("INVALIDATION", invalidation.DatabaseInvalidation())


@pytest.fixture(scope="session")
def daphne(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    with running_daphne(tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="session")
def second_daphne(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    """Another process serving the same database and channel layer: what a load balancer spreads clients over."""
    with running_daphne(tmp_path_factory) as server:
        yield server


@pytest.fixture
def daphne_url(daphne: Daphne) -> str:
    if daphne.process.poll() is not None:
        pytest.fail(f"daphne has exited with status {daphne.process.returncode}:\n{daphne.stderr()}")
    return daphne.url


@pytest.fixture
def live_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    """A server with the demo tools, an agent and a scoped token, committed so that daphne sees them.

    Built in a sync fixture because async tests may not touch the ORM directly.
    """
    return access_factory()


@pytest.fixture
def legacy_only_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    """A server limited to the handshake-era revisions."""
    return access_factory(protocol_versions=["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])


@pytest.fixture
def modern_only_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    """A server limited to 2026-07-28, like the demo's ``demo-modern``."""
    return access_factory(protocol_versions=["2026-07-28"])


@pytest.fixture(scope="session")
def celery_worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Celery worker (tests/e2e/workers.py) serving the test database and Redis for the whole session: a
    thread pool, many calls at once in one process (test_worker_loss.py runs prefork workers)."""
    from tests.e2e.workers import running_worker

    with running_worker(tmp_path_factory, pool="threads", concurrency=16, queue=SESSION_QUEUE) as worker:
        yield worker


@pytest.fixture(scope="module")
def styled_daphne(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    """daphne as in production: DEBUG off, static files collected and served by WhiteNoise."""
    root = Path(__file__).resolve().parents[2]
    static_root = tmp_path_factory.mktemp("browser-static")
    env = {key: value for key, value in os.environ.items() if key != "DEBUG"}
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=root,
        env={**env, "STATIC_ROOT": str(static_root)},
        check=True,
        timeout=120,
    )
    with running_daphne(tmp_path_factory, {"DEBUG": "0", "STATIC_ROOT": str(static_root)}) as server:
        yield server


@pytest.fixture
def shared_log(settings: Any) -> None:
    """This process publishes where the daphne processes follow (``_publish_where_daphne_follows`` sets it up)."""
    if not settings.REDIS_URL and REQUIRE_SERVICES:
        pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not configured")


# Resumed streams of the processes ``launch`` starts end after this long idle (the crash tests wait for it).
RESUME_IDLE_SECONDS = 1.5


@pytest.fixture
def launch(transactional_db: None, tmp_path: Path) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], str]]]:
    """Start daphne processes of their own on the test database (the crash and orphan-recovery tests kill
    them); each is stopped (or already dead) at the end."""
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
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
