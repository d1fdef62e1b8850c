"""``/healthz``, ``/readyz`` and ``/metrics``: small ASGI applications routed next to the MCP endpoint.

Plain ASGI callables, not Django views, so that neither Django's middleware (SSL redirect, Host checks), nor the
MCP authorisation, nor the audit sees them: a load balancer probing a pod by IP over plain HTTP gets its answer.
``readyz`` probes each dependency of ``CHECKS`` concurrently, on a thread of its own, within
``HEALTH_CHECK_TIMEOUT_SECONDS``. What each answers: docs/deployment.md. Not owned here: ``observability.metrics``.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connection

from ..backends import backends
from ..conf import mcp_settings
from . import metrics

logger = logging.getLogger("mcp_app.health")

OK, DOWN, SKIPPED = "ok", "down", "skipped"
_JSON = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
_last_status: dict[str, str] = {}
T = TypeVar("T")


async def _respond(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _only_get(scope: dict[str, Any], send: Any) -> bool:
    if scope["method"] in ("GET", "HEAD"):
        return True
    body = orjson.dumps({"error": f"Method {scope['method']} is not allowed."})
    await _respond(send, 405, body, [*_JSON, (b"allow", b"GET, HEAD")])
    return False


async def healthz(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if await _only_get(scope, send):
        await _respond(send, 200, b'{"status":"ok"}', _JSON)


# Readiness -----------------------------------------------------------------------------------------------


# Each blocking probe runs on a thread of its own: not on the thread that database_sync_to_async and the cache's
# async methods share (a request stuck on an unreachable database would hold it, and the cache would be reported
# down with the database), nor on the default executor that tool calls fill.
_probe_threads: dict[str, ThreadPoolExecutor] = {}


async def _off_loop(name: str, function: Callable[[], T]) -> T:
    executor = _probe_threads.get(name)
    if executor is None:
        executor = _probe_threads.setdefault(name, ThreadPoolExecutor(1, thread_name_prefix=f"readyz-{name}"))
    return await asyncio.get_running_loop().run_in_executor(executor, function)


def _in_own_connection(function: Callable[[], T]) -> Callable[[], T]:
    """``function`` with Django's connection housekeeping around it, as ``database_sync_to_async`` does (a pooled
    connection goes back to the pool)."""

    def run() -> T:
        close_old_connections()
        try:
            return function()
        finally:
            close_old_connections()

    return run


def _ping_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _store_and_read() -> None:
    key = f"mcp:readyz:{secrets.token_hex(6)}"
    cache.set(key, "1", timeout=10)
    if cache.get(key) != "1":
        raise RuntimeError("the cache did not return what was stored")
    cache.delete(key)


def _on_own_thread(name: str, probe: Callable[[], None]) -> Callable[[], Awaitable[str]]:
    """The check that runs the blocking ``probe`` on the thread of ``name`` and is ``ok`` when it returns."""

    async def check() -> str:
        await _off_loop(name, probe)
        return OK

    return check


async def _check_channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        return SKIPPED
    # A plain channel of its own, not a process-specific one (``new_channel``): channels-redis reads those through
    # one per-process receive lock that a long-lived subscription (a worker call's) holds, so the probe would
    # wait on it; a plain channel is read directly, by this probe alone.
    channel = f"mcp.readyz.{secrets.token_hex(8)}"
    await layer.send(channel, {"type": "mcp.readyz"})
    message = await layer.receive(channel)
    if message.get("type") != "mcp.readyz":
        raise RuntimeError("the channel layer returned another message")
    return OK


def redis_urls() -> list[str]:
    """Every Redis URL the settings name (cache, channel layer, shared-state backends, Celery broker), without
    repeats."""
    found: list[str] = []

    def add(value: Any) -> None:
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            url = item.get("address") if isinstance(item, dict) else item
            if isinstance(url, str) and url.startswith(("redis://", "rediss://", "unix://")) and url not in found:
                found.append(url)

    for cache_config in getattr(settings, "CACHES", {}).values():
        if "redis" in str(cache_config.get("BACKEND", "")).lower():
            add(cache_config.get("LOCATION"))
    for layer in getattr(settings, "CHANNEL_LAYERS", {}).values():
        add(layer.get("CONFIG", {}).get("hosts", []))
    for config in backends.configs().values():
        add(config.get("OPTIONS", {}).get("url"))
    add(getattr(settings, "CELERY_BROKER_URL", None))
    return found


async def _check_redis() -> str:
    urls = redis_urls()
    if not urls:
        return SKIPPED
    from ..redis_pool import redis_client  # redis-py: only where Redis is configured

    for url in urls:  # within HEALTH_CHECK_TIMEOUT_SECONDS (``_probe``)
        await redis_client(url).ping()
    return OK


NO_WORKER = "none"


async def _check_workers() -> str | tuple[str, dict[str, Any]]:
    """Whether a worker consumes the queue of worker calls: worker processes beating for it (``mcp_app.heartbeat``,
    one Redis round trip, no Celery inspect). ``none`` is down only with ``READYZ_REQUIRES_WORKER``."""
    from .. import heartbeat

    queue = await _off_loop("workers", heartbeat.worker_queue)
    if queue is None:
        return SKIPPED
    count = await _off_loop("workers", functools.partial(heartbeat.consumers, queue))
    if count:
        return OK, {"consumers": count, "queue": queue}
    return (DOWN if mcp_settings.READYZ_REQUIRES_WORKER else NO_WORKER), {"consumers": 0, "queue": queue}


CHECKS: dict[str, Callable[[], Awaitable[str | tuple[str, dict[str, Any]]]]] = {
    "database": _on_own_thread("database", _in_own_connection(_ping_database)),
    "cache": _on_own_thread("cache", _store_and_read),
    "channel_layer": _check_channel_layer,
    "redis": _check_redis,
    "workers": _check_workers,
}


def _error_name(exc: Exception) -> str:
    """What the body says of a failed probe: the exception's class, never its message (a URL, a password)."""
    return "Timeout" if isinstance(exc, TimeoutError) else type(exc).__name__


async def _probe(
    name: str, check: Callable[[], Awaitable[str | tuple[str, dict[str, Any]]]], limit: float
) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        outcome = await asyncio.wait_for(check(), timeout=limit)
        status, details = outcome if isinstance(outcome, tuple) else (outcome, {})
        result: dict[str, Any] = {"status": status, **details}
    except Exception as exc:
        metrics.record_dependency_error(name)
        result = {"status": DOWN, "error": _error_name(exc)}
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
    if _last_status.get(name) != result["status"]:
        # Log transitions only: a probe every few seconds must not flood the logs while a dependency is down.
        level = logging.WARNING if result["status"] in (DOWN, NO_WORKER) else logging.INFO
        reason = f" ({result['error']})" if "error" in result else ""
        logger.log(level, "readiness: %s is %s%s", name, result["status"], reason)
        _last_status[name] = result["status"]
    return result


async def readiness() -> tuple[bool, dict[str, dict[str, Any]]]:
    """Probe every dependency at once; ready when none is down."""
    timeout = float(mcp_settings.HEALTH_CHECK_TIMEOUT_SECONDS)
    results = await asyncio.gather(*(_probe(name, check, timeout) for name, check in CHECKS.items()))
    checks = dict(zip(CHECKS, results, strict=True))
    return all(check["status"] != DOWN for check in checks.values()), checks


def _open_upstreams() -> list[dict[str, Any]]:
    from ..federation import breaker

    found = breaker.open_breakers()
    if not found:
        return []
    from ..models import Upstream

    rows = Upstream.objects.filter(pk__in=found).values_list("pk", "name", "tenant__slug").order_by("pk")
    return [
        {
            "id": pk,
            "name": name,
            "tenant": tenant,
            "status": found[pk].status,
            "open_until": until.isoformat() if (until := found[pk].open_until) else None,
        }
        for pk, name, tenant in rows
    ]


async def upstreams_detail() -> dict[str, Any]:
    """The upstreams whose breaker is open or half-open; ``{"error": ...}`` if they cannot be read in time."""
    try:
        open_now = await asyncio.wait_for(
            _off_loop("upstreams", _in_own_connection(_open_upstreams)),
            timeout=float(mcp_settings.HEALTH_CHECK_TIMEOUT_SECONDS),
        )
    except Exception as exc:
        return {"error": _error_name(exc)}
    return {"open": open_now}


async def readyz(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if not await _only_get(scope, send):
        return
    (ready, checks), upstreams = await asyncio.gather(readiness(), upstreams_detail())
    body = orjson.dumps({"status": "ok" if ready else "unavailable", "checks": checks, "upstreams": upstreams})
    await _respond(send, 200 if ready else 503, body, _JSON)


# Metrics -------------------------------------------------------------------------------------------------


def _bearer(scope: dict[str, Any]) -> str | None:
    scheme, _, credentials = (header(scope, b"authorization") or "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def header(scope: dict[str, Any], name: bytes) -> str | None:
    """The request header ``name`` (lowercase) of an ASGI ``scope``, or ``None``."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def metrics_endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if not await _only_get(scope, send):
        return
    expected = mcp_settings.METRICS_TOKEN
    if not expected:
        await _respond(send, 404, b'{"error":"Metrics are disabled: set MCP_APP[\\"METRICS_TOKEN\\"]."}', _JSON)
        return
    offered = _bearer(scope)
    if offered is None or not hmac.compare_digest(offered.encode(), expected.encode()):
        headers = [*_JSON, (b"www-authenticate", b'Bearer realm="mcp-host-metrics"')]
        await _respond(send, 401, b'{"error":"Authorization: Bearer <metrics token> is required."}', headers)
        return
    # On a thread of its own, with the database's housekeeping: samplers read state from it (metrics.sample_at_scrape).
    body, content_type = await _off_loop("metrics", _in_own_connection(metrics.exposition))
    await _respond(send, 200, body, [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")])
