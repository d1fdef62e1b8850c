"""``mcp_app.backends``: every backend of shared state by name from one setting, built once, pinned by tests,
forgotten when the settings change; one outage tracker; one client factory (``mcp_app.redis_pool``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import override_settings

from mcp_app.backends import BackendManager, Health, backends
from mcp_app.conf import DEFAULT_BACKENDS
from mcp_app.federation import breaker
from mcp_app.limits import quotas, rates
from mcp_app.transport.eventstore import get_event_store


class Stoppable:
    def __init__(self, **options: Any) -> None:
        self.options = options
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


STOPPABLE = {"BACKEND": "tests.test_backends.Stoppable", "OPTIONS": {"url": "redis://nowhere"}}


def test_one_setting_names_every_backend_and_a_name_left_out_keeps_its_default() -> None:
    manager = BackendManager()
    with override_settings(MCP_APP={"BACKENDS": {"BREAKERS": STOPPABLE}}):
        assert (
            set(manager.configs())
            == set(DEFAULT_BACKENDS)
            == {
                "EVENT_STORE",
                "INVALIDATION",
                "HEARTBEAT",
                "WORKER_QUOTAS",
                "STREAM_CAPS",
                "RATE_LIMITS",
                "BUDGETS",
                "BREAKERS",
            }
        )
        assert isinstance(manager["RATE_LIMITS"], rates.LocalRates)
        assert manager["BREAKERS"].options == {"url": "redis://nowhere"}


def test_the_breakers_are_configured_like_every_other_backend(settings: Any) -> None:
    """Not by ``REDIS_URL``: the breaker follows ``BACKENDS`` whatever the project's Redis is."""
    settings.MCP_APP = {**settings.MCP_APP, "BACKENDS": {"BREAKERS": STOPPABLE}}
    settings.REDIS_URL = None
    assert isinstance(breaker.breakers(), Stoppable)


def test_a_backend_is_built_once_and_forgotten_and_stopped_when_the_settings_change(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "BACKENDS": {"INVALIDATION": STOPPABLE}}
    first = backends["INVALIDATION"]
    assert backends["INVALIDATION"] is first
    settings.MCP_APP = {**settings.MCP_APP, "EVENT_STORE_TTL_SECONDS": 7}
    assert first.stopped
    assert backends["INVALIDATION"] is not first


def test_a_backend_set_by_a_test_stays_until_set_back(settings: Any) -> None:
    built = quotas.get_quotas()
    mine = quotas.LocalQuotas()
    assert backends.set("WORKER_QUOTAS", mine) is built
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_CALL_LEASE_SECONDS": 5.0}  # the settings change: still mine
    assert quotas.get_quotas() is mine
    assert backends.set("WORKER_QUOTAS", None) is mine
    assert quotas.get_quotas() is not mine


def test_the_use_backend_fixture_pins_one_name(use_backend: Any) -> None:
    store = use_backend("EVENT_STORE", object())
    assert get_event_store() is store


def test_an_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    health = Health("TEST_STATE", "tests go on meanwhile")
    with caplog.at_level(logging.INFO, logger="mcp_app.backends"):
        for _ in range(3):
            assert health.attempt_sync(lambda: 1 // 0, lambda: "fallback") == "fallback"
        assert not health.up
        for _ in range(3):
            assert health.attempt_sync(lambda: "answer", lambda: "fallback") == "answer"
        assert health.up
    lines = [record.getMessage() for record in caplog.records if "TEST_STATE" in record.getMessage()]
    assert len(lines) == 2
    assert "unavailable (ZeroDivisionError" in lines[0] and "tests go on meanwhile" in lines[0]
    assert "available again" in lines[1]


def test_one_blocking_client_per_url_and_scripts_registered_once() -> None:
    pytest.importorskip("redis")
    from mcp_app.redis_pool import script, sync_redis_client

    client = sync_redis_client("redis://127.0.0.1:1/0")
    assert sync_redis_client("redis://127.0.0.1:1/0") is client
    assert sync_redis_client("redis://127.0.0.1:1/0", socket_timeout=9.0) is not client
    assert script(client, "return 1") is script(client, "return 1")
