"""System checks: a misconfigured ``MCP_APP`` is reported by ``manage.py check`` instead of at first request."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from .conf import mcp_settings


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    try:
        mcp_settings.reload()
        mcp_settings.MAX_BODY_BYTES  # noqa: B018  (forces validation)
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="mcp_app.E001")]
    return []
