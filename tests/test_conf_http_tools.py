"""Settings of http tools: validated with the others (a bad allow-list or key list fails loudly), deploy check."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mcp_app.conf import mcp_settings


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"SECRET_KEYS": "one-key"}, "must be list or tuple"),
        ({"SECRET_KEYS": ["ok", ""]}, "non-empty strings"),
        ({"HTTP_TOOL_ALLOWED_NETWORKS": ["10.0.0.0/33"]}, "HTTP_TOOL_ALLOWED_NETWORKS"),
        ({"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1:notaport"]}, "invalid port"),
        ({"HTTP_TOOL_MAX_TIMEOUT_SECONDS": 0}, "must be positive"),
        ({"HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS": 120}, "at most HTTP_TOOL_MAX_TIMEOUT_SECONDS"),
        ({"HTTP_TOOL_MAX_RESPONSE_BYTES": 0}, "at least 1"),
    ],
)
def test_invalid_http_tool_settings_are_refused(value, message):
    with override_settings(MCP_APP=value), pytest.raises(ImproperlyConfigured, match=message):
        mcp_settings.HTTP_TOOL_ALLOWED_NETWORKS  # noqa: B018


def test_valid_http_tool_settings_load():
    value = {"SECRET_KEYS": ["k1", "k0"], "HTTP_TOOL_ALLOWED_NETWORKS": ["10.0.0.0/8", "[::1]:9000", "hooks.lan"]}
    with override_settings(MCP_APP=value):
        assert mcp_settings.SECRET_KEYS == ["k1", "k0"]
        assert mcp_settings.HTTP_TOOL_MAX_RESPONSE_BYTES == 1024 * 1024


def test_the_deploy_check_warns_without_secret_keys():
    ids = {message.id for message in run_checks(include_deployment_checks=True)}
    assert "mcp_app.W001" in ids
    with override_settings(MCP_APP={"SECRET_KEYS": ["k1"]}):
        assert "mcp_app.W001" not in {message.id for message in run_checks(include_deployment_checks=True)}
