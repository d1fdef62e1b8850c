"""System checks: a misconfigured ``MCP_APP`` is reported by ``manage.py check`` instead of at first request."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured

from .conf import load, mcp_settings


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    try:
        load()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="mcp_app.E001")]
    return []


@register(deploy=True)
def check_secret_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckWarning]:
    try:
        if mcp_settings.SECRET_KEYS:
            return []
    except ImproperlyConfigured:
        return []  # reported by check_settings
    return [
        CheckWarning(
            "MCP_APP['SECRET_KEYS'] is not set: http tools' secret headers are encrypted with keys derived from "
            "SECRET_KEY, so rotating SECRET_KEY without SECRET_KEY_FALLBACKS makes them unreadable.",
            hint="Set MCP_APP['SECRET_KEYS'] to a list of high-entropy strings (newest first).",
            id="mcp_app.W001",
        )
    ]
