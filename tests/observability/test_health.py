"""/healthz and /readyz in-process: no authorisation, per-dependency JSON, 405 for other methods.

Redis being stopped is tested against a real daphne and a Redis of its own in ``tests/e2e/test_operations.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from tests.helpers import call

pytestmark = pytest.mark.django_db(transaction=True)


async def test_healthz_answers_without_credentials(access: Any) -> None:
    reply = await call(access, method="GET", path="/healthz", query="", drop=("authorization",))
    assert reply.status == 200
    assert reply.json() == {"status": "ok"}
    assert reply.headers["cache-control"] == "no-store"


async def test_readyz_names_each_dependency(access: Any) -> None:
    reply = await call(access, method="GET", path="/readyz", query="", drop=("authorization",))
    assert reply.status == 200, reply.body
    checks = reply.json()["checks"]
    assert set(checks) == {"database", "cache", "channel_layer", "redis", "workers"}
    assert checks["database"]["status"] == "ok"
    assert checks["cache"]["status"] == "ok"
    assert checks["channel_layer"]["status"] == "ok"
    assert checks["redis"]["status"] == ("ok" if settings.REDIS_URL else "skipped")
    assert all(isinstance(check["latency_ms"], float) for check in checks.values())


async def test_readyz_is_503_when_a_dependency_is_unreachable(access: Any) -> None:
    # A port nothing listens on: the cache (and the Redis probe) fail, the database is still fine.
    from tests.e2e.conftest import free_port

    dead = f"redis://127.0.0.1:{free_port()}/0"
    caches = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": dead}}
    with override_settings(CACHES=caches, MCP_APP={"HEALTH_CHECK_TIMEOUT_SECONDS": 2}):
        reply = await call(access, method="GET", path="/readyz", query="", drop=("authorization",))
    assert reply.status == 503
    body = reply.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["cache"]["status"] == "down"
    assert body["checks"]["redis"]["status"] == "down"
    assert body["checks"]["database"]["status"] == "ok"
    assert dead not in reply.body.decode()


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_other_methods_are_405(access: Any, path: str) -> None:
    reply = await call(access, {"x": 1}, method="POST", path=path, query="")
    assert reply.status == 405
    assert reply.headers["allow"] == "GET, HEAD"


def test_the_root_says_what_is_served(client: Any) -> None:
    response = client.get("/")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "mcp-host"
    assert body["health"] == "/healthz"
    assert body["mcp"].startswith("/mcp/")


async def test_readyz_lists_upstreams_whose_breaker_is_open_and_stays_ready(access: Any, settings: Any) -> None:
    from asgiref.sync import sync_to_async

    from mcp_app.federation import breaker
    from mcp_app.models import Upstream

    settings.MCP_APP = {**settings.MCP_APP, "UPSTREAM_BREAKER_FAILURES": 2, "UPSTREAM_BREAKER_COOLDOWN_SECONDS": 60}
    down, up = await sync_to_async(
        lambda: [
            Upstream.objects.create(tenant=access.tenant, name=name, url="https://mcp.example.com/mcp")
            for name in ("down", "up")
        ]
    )()
    quiet = await call(access, method="GET", path="/readyz", query="", drop=("authorization",))
    assert quiet.json()["upstreams"] == {"open": []}
    try:
        for _ in range(2):
            await breaker.failed(down.pk)
        await breaker.failed(up.pk)
        reply = await call(access, method="GET", path="/readyz", query="", drop=("authorization",))
    finally:
        breaker.reset(down.pk)
        breaker.reset(up.pk)
    assert reply.status == 200, reply.body
    body = reply.json()
    assert body["status"] == "ok"
    [listed] = body["upstreams"]["open"]
    assert listed.pop("open_until")
    assert listed == {"id": down.pk, "name": "down", "tenant": access.tenant.slug, "status": "open"}
