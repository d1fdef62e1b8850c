"""App configuration: connects catalog and cache-invalidation signals, registers system checks, autodiscovers ``mcp_tools`` modules."""

from __future__ import annotations

from django.apps import AppConfig


class McpAppConfig(AppConfig):
    name = "mcp_app"
    verbose_name = "MCP hosting"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers system checks)
        from .caching import signals as caching_signals  # noqa: F401  (connects receivers)
        from .catalog import signals  # noqa: F401  (connects receivers)
        from .catalog.registry import registry
        from .conf import mcp_settings

        registry.autodiscover(mcp_settings.TOOLS_MODULE)
