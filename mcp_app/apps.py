"""App configuration: connects catalog and cache-invalidation signals, registers system checks, autodiscovers
``mcp_tools`` modules, lets OAuth clients use private-use redirect schemes, adds the event store to what
``mcp_purge`` purges, starts the usage ledger and switches tracing on if configured."""

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
        from .conf import mcp_settings
        from .definitions.registry import registry
        from .limits import (
            budget_meter,  # noqa: F401  (listens to usage.spent: tool-seconds and cost budgets)
            budget_seed,  # noqa: F401  (a saved budget's counters start from the ledger)
        )
        from .oauth import redirects
        from .oauth import signals as oauth_signals  # noqa: F401  (connects receivers)
        from .runtime import decisions  # a decision on an approval wakes the call waiting for it (on_decision)

        redirects.install()  # private-use redirect schemes of native clients (RFC 8252)

        registry.autodiscover(mcp_settings.TOOLS_MODULE)

        # A handler meeting the database unavailable: the edge answers 503 with Retry-After (mcp_app.database).
        from .database import DATABASE_ERRORS
        from .protocol.handlers.base import dispatcher

        dispatcher.treat_as_unavailable(*DATABASE_ERRORS)

        # mcp_purge (and Celery beat) also purge the SSE event store, which transport owns.
        from .maintenance import register_purger
        from .transport.eventstore import purge_event_store

        register_purger("SSE event streams", purge_event_store)
        # Approvals past their expiry end (and their parked calls); ended ones go after the audit retention.
        register_purger("approvals", decisions.purge_approvals)

        # The usage ledger counts every tool call this process runs (serving processes and Celery workers alike).
        from .limits import ledger

        ledger.install()

        # OpenTelemetry when MCP_APP["TRACING"] is on (before the request handler is built: Django's views too).
        from .observability import tracing

        tracing.configure(at_startup=True)
