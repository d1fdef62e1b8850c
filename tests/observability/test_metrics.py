"""Prometheus metrics: traffic through the real router and consumer moves the counters a scrape of /metrics shows.

Values are read back from the text exposition (what Prometheus reads), before and after the traffic, so other
tests' traffic in the same process cannot make these pass or fail.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import call, rpc

pytestmark = pytest.mark.django_db(transaction=True)

METRICS_TOKEN = "scrape-secret-for-tests"


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def _scrape(access: Any) -> dict[Any, float]:
    reply = await call(
        access, method="GET", path="/metrics", query="", headers={"authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert reply.status == 200, reply.body
    assert reply.content_type.startswith("text/plain")
    return _samples(reply.body.decode())


@override_settings(MCP_APP={"METRICS_TOKEN": METRICS_TOKEN})
async def test_counters_move_with_traffic(access: Any) -> None:
    before = await _scrape(access)
    ok = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert ok.status == 200
    invalid = await call(access, rpc("tools/call", {"name": "add", "arguments": {"a": "x", "b": 1}}))
    assert invalid.status == 200
    denied = await call(access, rpc("tools/list"), headers={"authorization": "Bearer mcp_00000000_nope"})
    assert denied.status == 401
    streamed = await call(
        access,
        rpc(
            "tools/call",
            {"name": "progress_demo", "arguments": {"steps": 1, "delay_ms": 0}, "_meta": {"progressToken": 1}},
        ),
    )
    assert streamed.content_type.startswith("text/event-stream")
    after = await _scrape(access)

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    requests = "mcp_requests_total"
    assert moved(requests, http_method="POST", rpc_method="tools/call", era="legacy", status="200") == 3
    assert moved(requests, http_method="POST", rpc_method="-", era="-", status="401") == 1
    assert moved("mcp_tool_call_duration_seconds_count", tool="echo", outcome="ok") == 1
    assert moved("mcp_tool_call_duration_seconds_count", tool="add", outcome="invalid_arguments") == 1
    assert moved("mcp_tool_call_duration_seconds_count", tool="progress_demo", outcome="ok") == 1
    assert moved("mcp_cache_lookups_total", cache="catalog", result="hit") >= 2
    # The stream was opened and closed again: the gauge is back where it was.
    assert _value(after, "mcp_sse_streams") == _value(before, "mcp_sse_streams")
    assert ("mcp_worker_calls", frozenset({("state", "queued")})) in after
    assert ("mcp_dependency_errors_total", frozenset({("dependency", "redis")})) in after


@override_settings(MCP_APP={"METRICS_TOKEN": METRICS_TOKEN})
async def test_metrics_need_the_token(access: Any) -> None:
    cases: list[dict[str, Any]] = [
        {"drop": ("authorization",)},
        {"headers": {"authorization": "Bearer wrong"}},
        {"headers": {"authorization": f"Basic {METRICS_TOKEN}"}},
        {"headers": {"authorization": f"Bearer {METRICS_TOKEN}x"}},
    ]
    for case in cases:
        reply = await call(access, method="GET", path="/metrics", query="", **case)
        assert reply.status == 401
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert b"mcp_requests_total" not in reply.body


async def test_metrics_are_off_without_a_token(access: Any) -> None:
    reply = await call(
        access, method="GET", path="/metrics", query="", headers={"authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert reply.status == 404


async def test_the_request_id_is_echoed(access: Any) -> None:
    reply = await call(access, rpc("ping"), headers={"x-request-id": "abc-123"})
    assert reply.headers["x-request-id"] == "abc-123"
    fresh = await call(access, rpc("ping"), headers={"x-request-id": "not an id\n"})
    assert re.fullmatch(r"[0-9a-f]{16}", fresh.headers["x-request-id"])


def test_rpc_method_labels_are_bounded() -> None:
    from mcp_app.observability.metrics import rpc_method

    assert rpc_method({"method": "tools/call"}) == "tools/call"
    assert rpc_method({"method": "x" * 500}) == "other"
    assert rpc_method({"method": "notifications/initialized"}) == "notification"
    assert rpc_method({"id": 1, "result": {}}) == "response"
    assert rpc_method([{"method": "ping"}]) == "batch"


def test_dependency_errors_are_classified() -> None:
    import redis.exceptions
    from django.db import OperationalError

    from mcp_app.observability.metrics import dependency_of

    assert dependency_of(OperationalError("gone")) == "database"
    assert dependency_of(redis.exceptions.ConnectionError("refused")) == "redis"
    assert dependency_of(ValueError("bug")) is None
