"""Operations against real daphne processes: readiness with Redis stopped, JSON request logs, multiprocess metrics.

The Redis here is this module's own ``redis-server`` on a free port (never the shared one), so it can be stopped
and started again. The daphne processes under test use it for their channel layer, cache and event store, the
test database for the rest, JSON logs, a metrics token, and one ``PROMETHEUS_MULTIPROC_DIR`` between them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REQUIRE_SERVICES, Access
from tests.e2e.conftest import Daphne, free_port, port_open, running_daphne

pytestmark = pytest.mark.e2e

METRICS_TOKEN = "e2e-metrics-token"
WAIT_SECONDS = 15.0


class OwnRedis:
    """A redis-server on a free 127.0.0.1 port that a test may stop and start again (same port)."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [*command, "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + WAIT_SECONDS
        while not port_open(self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                pytest.fail(f"redis-server did not listen on port {self.port}")
            try:
                self.process.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None
        deadline = time.monotonic() + WAIT_SECONDS
        while port_open(self.port):
            assert time.monotonic() < deadline, "redis-server kept listening after it was stopped"
            time.sleep(0.05)  # bounded: waiting for the kernel to close the listening socket


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        if REQUIRE_SERVICES:
            pytest.fail("redis-server is needed for the readiness tests")
        pytest.skip("redis-server is not installed")
    redis = OwnRedis(binary, tmp_path_factory.mktemp("redis"))
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture(scope="module")
def metrics_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prometheus")


def _ops_env(own_redis: OwnRedis, metrics_dir: Path) -> dict[str, str]:
    return {
        "REDIS_URL": own_redis.url,
        "MCP_LOG_FORMAT": "json",
        "MCP_METRICS_TOKEN": METRICS_TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }


@pytest.fixture(scope="module")
def ops_daphne(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, own_redis: OwnRedis, metrics_dir: Path
) -> Iterator[Daphne]:
    with running_daphne(tmp_path_factory, _ops_env(own_redis, metrics_dir)) as server:
        yield server


@pytest.fixture(scope="module")
def ops_daphne_two(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, own_redis: OwnRedis, metrics_dir: Path
) -> Iterator[Daphne]:
    with running_daphne(tmp_path_factory, _ops_env(own_redis, metrics_dir)) as server:
        yield server


def _readyz(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=10)


def _until(predicate: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        outcome = predicate()
        if outcome:
            return outcome
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # bounded polling of a real server


# daphne's readiness probes the test database: have pytest-django create it even when this test runs alone.
@pytest.mark.django_db
def test_readyz_reports_redis_down_while_healthz_answers(ops_daphne: Daphne, own_redis: OwnRedis) -> None:
    ready = _readyz(ops_daphne.url)
    assert ready.status_code == 200, ready.text
    checks = ready.json()["checks"]
    assert {name: check["status"] for name, check in checks.items()} == {
        "database": "ok",
        "cache": "ok",
        "channel_layer": "ok",
        "redis": "ok",
        # No worker beats on this module's own Redis: "none" is reported, and is not "down" (the default).
        "workers": "none",
    }

    own_redis.stop()
    try:
        down = _readyz(ops_daphne.url)
        assert down.status_code == 503, down.text
        body = down.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["database"]["status"] == "ok"
        for name in ("redis", "cache", "channel_layer"):
            assert body["checks"][name]["status"] == "down", body
            assert body["checks"][name]["error"]
        assert own_redis.url not in down.text
        health = httpx.get(f"{ops_daphne.url}/healthz", timeout=10)
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}
    finally:
        own_redis.start()
    _until(lambda: _readyz(ops_daphne.url).status_code == 200, "/readyz to recover after Redis came back")
    assert "readiness: redis is down" in ops_daphne.stderr()


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_request_log_lines_are_json_with_context_and_no_token(
    ops_daphne: Daphne, live_access: Access, own_redis: OwnRedis
) -> None:
    url = f"{ops_daphne.url}{live_access.path}?{live_access.query}"
    headers = {
        "Authorization": f"Bearer {live_access.raw_token}",
        "Accept": "application/json, text/event-stream",
        "X-Request-ID": "e2e-log-1",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "s3cr3t-arg"}},
    }
    reply = httpx.post(url, json=body, headers=headers, timeout=10)
    assert reply.status_code == 200
    assert reply.headers["x-request-id"] == "e2e-log-1"

    def access_lines() -> list[dict[str, Any]]:
        return [
            line
            for line in _json_lines(ops_daphne.stderr())
            if line.get("request_id") == "e2e-log-1" and line["logger"] == "mcp_app.access"
        ]

    (access,) = _until(access_lines, "the request's access line")
    assert access["tenant"] == live_access.tenant.slug
    assert access["server"] == live_access.server.server_id
    assert access["agent"] == live_access.agent.agent_id
    assert access["method"] == "tools/call"
    assert access["era"] == "legacy"
    assert access["status"] == 200
    assert access["level"] == "INFO"
    output = ops_daphne.stderr()
    assert live_access.raw_token not in output
    assert live_access.raw_token.split("_", 2)[2] not in output  # the secret part alone
    assert "s3cr3t-arg" not in output


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    reply = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert reply.status_code == 200, reply.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def test_metrics_add_up_over_processes(ops_daphne: Daphne, ops_daphne_two: Daphne, live_access: Access) -> None:
    key = (
        "mcp_tool_call_duration_seconds_count",
        frozenset({("tool", "add"), ("outcome", "ok")}),
    )
    before = _scrape(ops_daphne.url).get(key, 0.0)
    headers = {"Authorization": f"Bearer {live_access.raw_token}", "Accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    for server, times in ((ops_daphne, 2), (ops_daphne_two, 3)):
        for _ in range(times):
            reply = httpx.post(
                f"{server.url}{live_access.path}?{live_access.query}", json=body, headers=headers, timeout=10
            )
            assert reply.status_code == 200
    # Either process reports the calls of both.
    assert _scrape(ops_daphne.url)[key] - before == 5
    assert _scrape(ops_daphne_two.url)[key] - before == 5
