"""The switch of OpenTelemetry tracing: ``MCP_APP["TRACING"]`` (off by default; needs the ``mcp-host[otel]`` extra).

``active()`` is what every hook asks: the live ``otel.Tracing``, else ``None`` from a module global, so that with
tracing off a hook costs one function call and ``opentelemetry`` is never imported. ``configure()`` applies the
setting at start-up and whenever ``MCP_APP`` changes. What tracing does: ``observability.otel``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from ..conf import mcp_settings, on_reload

if TYPE_CHECKING:
    from .otel import Tracing

_active: Tracing | None = None


def active() -> Tracing | None:
    """The live tracing, or ``None`` when ``MCP_APP["TRACING"]`` is off."""
    return _active


def configure(*, at_startup: bool = False) -> None:
    """Switch tracing on or off as ``MCP_APP["TRACING"]`` says (``at_startup``: Django's views can still be
    instrumented). Raises ``ImproperlyConfigured`` when it is on and OpenTelemetry is not installed."""
    global _active
    if mcp_settings.TRACING:
        if _active is None:
            from . import otel

            _active = otel.start(django_views=at_startup)
    elif _active is not None:
        _active.stop()
        _active = None


@on_reload
def _reconfigure() -> None:
    try:
        mcp_settings.TRACING  # noqa: B018  (validates the settings)
    except ImproperlyConfigured:
        return  # reported wherever the settings are read, and by the system check
    configure()
