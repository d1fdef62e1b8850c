"""The one settings object: defaults, validation of keys and types, reload on override, system check."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mcp_app.conf import AppSettings, mcp_settings


def test_defaults_apply_without_configuration():
    assert mcp_settings.MAX_BODY_BYTES == 4 * 1024 * 1024 == AppSettings.MAX_BODY_BYTES
    assert mcp_settings.SSE_KEEPALIVE_SECONDS == 25.0


def test_override_is_seen_and_undone():
    with override_settings(MCP_APP={"MAX_BATCH_SIZE": 7}):
        assert mcp_settings.MAX_BATCH_SIZE == 7
    assert AppSettings.MAX_BATCH_SIZE == mcp_settings.MAX_BATCH_SIZE


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"MAX_BODY_SIZE": 1}, "Unknown MCP_APP setting"),
        ({"MAX_BODY_BYTES": "4mb"}, "must be int"),
        ({"MAX_BODY_BYTES": True}, "must be int"),
        ({"MAX_BATCH_SIZE": 0}, "at least 1"),
        ({"SSE_KEEPALIVE_SECONDS": 0}, "positive"),
        ({"API_RATE_PER_KEY": "fast"}, "like '300/minute'"),
        ({"API_RATE_PER_USER": "0/minute"}, "like '300/minute'"),
        ({"API_RATE_PER_USER": 600}, "must be str or NoneType"),
        ({"BACKENDS": {"INVALIDATION": {"OPTIONS": {}}}}, "needs a BACKEND dotted path"),
        ({"BACKENDS": {"CACHE": {"BACKEND": "x.Y"}}}, "BACKENDS'] name 'CACHE'"),
        ({"INVALIDATION_STALENESS_SECONDS": 0}, "positive"),
        ({"WRITE_BEHIND_INTERVAL_SECONDS": -1}, "positive"),
        ({"IDENTITY_CACHE_SIZE": 0}, "at least 1"),
        ({"BACKENDS": {"WORKER_QUOTAS": {"OPTIONS": {}}}}, "BACKENDS'] entry 'WORKER_QUOTAS' needs a BACKEND"),
        ({"WORKER_QUOTAS": {"BACKEND": "x.Y"}}, "Unknown MCP_APP setting"),
        ({"WORKER_CALL_LEASE_SECONDS": 0}, "WORKER_CALL_LEASE_SECONDS'] must be positive"),
        ({"WORKER_CALLS_PER_TENANT": -1}, "must not be negative"),
        ({"WORKER_CALLS_PER_AGENT": -3}, "must not be negative"),
        ({"OAUTH_CONSENT_ROLE": "member"}, "must be 'viewer', 'admin' or 'owner'"),
        ({"MAX_BODY_BYTES": 1.5}, "must be int."),
        ({"SESSION_IDLE_SECONDS": "1"}, "must be int or float"),
        ({"ALLOWED_ORIGINS": "https://a.example"}, "must be list or tuple"),
        ({"BACKENDS": [("EVENT_STORE", {"BACKEND": "x"})]}, "BACKENDS'] must be dict"),
        ({"REDIS_MAX_CONNECTIONS": 1}, "at least 2"),
        ({"MAX_JSON_DEPTH": 201}, "between 1 and 200"),
        ({"STREAMS_PER_AGENT": -1}, "STREAMS_PER_AGENT'] must not be negative"),
        ({"RATE_LIMIT_PER_TOOL": -0.5}, "RATE_LIMIT_PER_TOOL'] must not be negative"),
        ({"HEARTBEAT_INTERVAL_SECONDS": 3.0}, "HEARTBEAT_TIMEOUT_SECONDS'] must be at least two intervals"),
        ({"OUTBOUND_ALLOWED_NETWORKS": ["10.0.0.0/33"]}, "OUTBOUND_ALLOWED_NETWORKS"),
    ],
)
def test_invalid_configuration_is_refused(value, message):
    with override_settings(MCP_APP=value):
        with pytest.raises(ImproperlyConfigured, match=message):
            mcp_settings.MAX_BODY_BYTES  # noqa: B018
        errors = [error for error in run_checks() if error.id == "mcp_app.E001"]
        assert errors and message in errors[0].msg


def test_a_flusher_thread_keeps_its_pace_while_the_settings_are_invalid():
    """The audit flusher and the budget meter read their interval on every tick, from a thread: an invalid
    override (refused to the code that made it) must not raise there and end the thread."""
    from mcp_app.conf import pace

    with override_settings(MCP_APP={"AUDIT_FLUSH_INTERVAL_SECONDS": 0.25}):
        assert pace("AUDIT_FLUSH_INTERVAL_SECONDS", 1.0) == 0.25
    with override_settings(MCP_APP={"RATE_LIMIT_PER_TOOL": -0.5}):
        assert pace("AUDIT_FLUSH_INTERVAL_SECONDS", 1.0) == 1.0
        assert pace("BUDGET_FLUSH_INTERVAL_SECONDS", 0.5) == 0.5


def test_each_setting_is_declared_once_with_its_type_and_default():
    defaults = AppSettings()  # the defaults meet their own rules
    assert isinstance(defaults.RATE_LIMIT_PER_TOOL, float)
    assert defaults.BACKENDS == {}  # every backend on its embedded default (conf.DEFAULT_BACKENDS)
    assert defaults.BACKENDS is not AppSettings().BACKENDS  # a mutable default is never shared
    with override_settings(MCP_APP={"ALLOWED_ORIGINS": ("https://a.example",), "SESSION_IDLE_SECONDS": 60}):
        assert mcp_settings.ALLOWED_ORIGINS == ("https://a.example",)
        assert mcp_settings.SESSION_IDLE_SECONDS == 60


def test_unknown_attribute_is_an_error():
    with pytest.raises(AttributeError):
        mcp_settings.NOT_A_SETTING  # noqa: B018


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"AUDIT_FLUSH_INTERVAL_SECONDS": 2}, "must be in \\(0, 1\\]"),
        ({"AUDIT_FLUSH_INTERVAL_SECONDS": 0}, "must be in \\(0, 1\\]"),
        ({"AUDIT_ENABLED": "yes"}, "must be bool"),
        ({"AUDIT_BUFFER_SIZE": 0}, "at least 1"),
        ({"AUDIT_RETENTION_DAYS": True}, "must be int"),
        ({"AUDIT_REDACT_KEYS": "(unclosed"}, "not a regular expression"),
    ],
)
def test_audit_settings_are_validated(value, message):
    with override_settings(MCP_APP=value), pytest.raises(ImproperlyConfigured, match=message):
        _ = mcp_settings.AUDIT_ENABLED


def test_audit_can_be_switched_off():
    with override_settings(MCP_APP={"AUDIT_ENABLED": False, "AUDIT_FLUSH_INTERVAL_SECONDS": 0.25}):
        assert mcp_settings.AUDIT_ENABLED is False
        assert mcp_settings.AUDIT_FLUSH_INTERVAL_SECONDS == 0.25
