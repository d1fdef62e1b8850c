"""The one settings object of mcp_app.

Projects configure the app with a single ``MCP_APP`` dictionary in their Django settings; defaults live here.
``mcp_settings`` is the singleton every module reads. It rejects unknown keys (a typo must not silently fall
back to a default), validates types, and reloads when tests change ``MCP_APP`` with ``override_settings``.

It does not own Django's own settings (databases, caches, channel layers): those belong to the project.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # Largest accepted POST body, in bytes. Larger bodies are refused with 400 before they are parsed.
    "MAX_BODY_BYTES": 4 * 1024 * 1024,
    # Largest JSON-RPC batch (array) accepted in one POST.
    "MAX_BATCH_SIZE": 50,
    # Seconds between keep-alive comments on idle SSE streams.
    "SSE_KEEPALIVE_SECONDS": 25.0,
    # A token's last-used timestamp is written at most this often (seconds), to keep writes off the hot path.
    "TOKEN_LAST_USED_INTERVAL_SECONDS": 60,
    # Origins accepted on every server in addition to each server's own allowed origins.
    "ALLOWED_ORIGINS": [],
    # Module name autodiscovered in every installed app for ``@tool`` registrations.
    "TOOLS_MODULE": "mcp_tools",
    # Largest number of resolved server catalogs kept in each process's memory.
    "CATALOG_CACHE_SIZE": 512,
    # ttlMs on cacheable 2026-07-28 results (discover, lists, reads): how long a client may reuse them.
    "CACHE_TTL_MS": 30_000,
    # A handshake-era session idle for longer than this (seconds) expires.
    "SESSION_IDLE_SECONDS": 3600,
    # How long a tool waits for the client to answer a sampling/elicitation request (seconds).
    "CLIENT_REQUEST_TIMEOUT_SECONDS": 300,
    # Where SSE events of session streams are kept for Last-Event-ID resumption, and for how long.
    "EVENT_STORE": {"BACKEND": "mcp_app.transport.eventstore.MemoryEventStore", "OPTIONS": {}},
    "EVENT_STORE_TTL_SECONDS": 3600,
    # The reconnection delay (retry:) announced on resumable streams, in milliseconds.
    "SSE_RETRY_MS": 1000,
    # Tasks extension: how long a task-capable call may run before it becomes a task, how long tasks are kept,
    # and the polling interval suggested to clients.
    "TASK_IMMEDIATE_SECONDS": 0.2,
    "TASK_TTL_MS": 3_600_000,
    "TASK_POLL_INTERVAL_MS": 500,
    # Items per page of tools/list, resources/list, resources/templates/list and prompts/list.
    "PAGE_SIZE": 100,
    # Audit log (one ToolCall row per tools/call, see mcp_app.runtime.audit). Records are buffered in memory and
    # written in batches at least every AUDIT_FLUSH_INTERVAL_SECONDS (the most a crash can lose) and at shutdown.
    "AUDIT_ENABLED": True,
    "AUDIT_FLUSH_INTERVAL_SECONDS": 1.0,
    # Most records held in memory (pending plus awaiting retry); beyond it new records are dropped, and logged.
    "AUDIT_BUFFER_SIZE": 10_000,
    # Rows per INSERT, and how many failed flushes a batch survives before it is dropped (and logged).
    "AUDIT_BATCH_SIZE": 500,
    "AUDIT_FLUSH_RETRIES": 5,
    # Tool calls older than this are deleted by ``mcp_purge`` (mcp_app.maintenance.purge_expired).
    "AUDIT_RETENTION_DAYS": 90,
    # Argument keys matching this regular expression (searched, case-insensitively) are stored as "[redacted]".
    "AUDIT_REDACT_KEYS": r"pass(word|phrase)?|secret|token|api[-_]?key|auth|credential|private[-_]?key|cookie|session",
    # Redacted copies keep strings up to this many characters, and this many items per list or object.
    "AUDIT_MAX_VALUE_CHARS": 256,
    "AUDIT_MAX_ITEMS": 50,
}

_TYPES: dict[str, tuple[type, ...]] = {
    "MAX_BODY_BYTES": (int,),
    "MAX_BATCH_SIZE": (int,),
    "SSE_KEEPALIVE_SECONDS": (int, float),
    "TOKEN_LAST_USED_INTERVAL_SECONDS": (int, float),
    "ALLOWED_ORIGINS": (list, tuple),
    "TOOLS_MODULE": (str,),
    "CATALOG_CACHE_SIZE": (int,),
    "CACHE_TTL_MS": (int,),
    "PAGE_SIZE": (int,),
    "SESSION_IDLE_SECONDS": (int, float),
    "CLIENT_REQUEST_TIMEOUT_SECONDS": (int, float),
    "EVENT_STORE": (dict,),
    "EVENT_STORE_TTL_SECONDS": (int, float),
    "SSE_RETRY_MS": (int,),
    "TASK_IMMEDIATE_SECONDS": (int, float),
    "TASK_TTL_MS": (int,),
    "TASK_POLL_INTERVAL_MS": (int,),
    "AUDIT_ENABLED": (bool,),
    "AUDIT_FLUSH_INTERVAL_SECONDS": (int, float),
    "AUDIT_BUFFER_SIZE": (int,),
    "AUDIT_BATCH_SIZE": (int,),
    "AUDIT_FLUSH_RETRIES": (int,),
    "AUDIT_RETENTION_DAYS": (int,),
    "AUDIT_REDACT_KEYS": (str,),
    "AUDIT_MAX_VALUE_CHARS": (int,),
    "AUDIT_MAX_ITEMS": (int,),
}


class McpSettings:
    """Attribute access to ``MCP_APP`` merged over ``DEFAULTS``, validated once per load."""

    def __init__(self) -> None:
        self._values: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        from django.conf import settings

        user = getattr(settings, "MCP_APP", {}) or {}
        if not isinstance(user, dict):
            raise ImproperlyConfigured("MCP_APP must be a dict.")
        unknown = sorted(set(user) - set(DEFAULTS))
        if unknown:
            raise ImproperlyConfigured(f"Unknown MCP_APP setting(s): {', '.join(unknown)}.")
        values = {**DEFAULTS, **user}
        for key, value in values.items():
            expected = _TYPES[key]
            if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be {' or '.join(t.__name__ for t in expected)}.")
        for key in (
            "MAX_BODY_BYTES",
            "MAX_BATCH_SIZE",
            "CATALOG_CACHE_SIZE",
            "PAGE_SIZE",
            "AUDIT_BUFFER_SIZE",
            "AUDIT_BATCH_SIZE",
            "AUDIT_FLUSH_RETRIES",
            "AUDIT_RETENTION_DAYS",
            "AUDIT_MAX_VALUE_CHARS",
            "AUDIT_MAX_ITEMS",
        ):
            if values[key] < 1:
                raise ImproperlyConfigured(f"MCP_APP[{key!r}] must be at least 1.")
        if "BACKEND" not in values["EVENT_STORE"]:
            raise ImproperlyConfigured("MCP_APP['EVENT_STORE'] needs a BACKEND dotted path.")
        if values["CACHE_TTL_MS"] < 0:
            raise ImproperlyConfigured("MCP_APP['CACHE_TTL_MS'] must not be negative.")
        if values["SSE_KEEPALIVE_SECONDS"] <= 0:
            raise ImproperlyConfigured("MCP_APP['SSE_KEEPALIVE_SECONDS'] must be positive.")
        if not 0 < values["AUDIT_FLUSH_INTERVAL_SECONDS"] <= 1:
            raise ImproperlyConfigured(
                "MCP_APP['AUDIT_FLUSH_INTERVAL_SECONDS'] must be in (0, 1]: it bounds what a crash loses."
            )
        try:
            re.compile(values["AUDIT_REDACT_KEYS"])
        except re.error as exc:
            raise ImproperlyConfigured(f"MCP_APP['AUDIT_REDACT_KEYS'] is not a regular expression: {exc}") from exc
        return values

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown MCP_APP setting {name!r}.")
        if self._values is None:
            self._values = self._load()
        return self._values[name]

    def reload(self) -> None:
        self._values = None


mcp_settings = McpSettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "MCP_APP":
        mcp_settings.reload()
        from .transport.eventstore import reset_event_store

        reset_event_store()
