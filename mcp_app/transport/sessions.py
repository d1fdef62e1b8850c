"""The database-backed ``Session`` the handlers see, and the session part of request admission.

``DatabaseSession`` (from the cached ``SessionEntry``) changes a session with one UPDATE from a worker thread, then
its invalidation; ``key`` names it in channel-layer groups without revealing its id. Idle expiry across
processes: docs/architecture.md ("Session expiry across processes").
"""

from __future__ import annotations

from datetime import datetime, timedelta

from channels.db import database_sync_to_async
from django.db import transaction

from .. import invalidation
from ..caching import identity
from ..caching.identity import SessionEntry
from ..conf import mcp_settings
from ..models import McpSession


def session_alive(entry: SessionEntry, now: datetime) -> bool:
    return now - entry.last_seen_at < timedelta(seconds=float(mcp_settings.SESSION_IDLE_SECONDS))


class DatabaseSession:
    __slots__ = ("client_capabilities", "key", "log_level", "pk", "protocol_version", "subscriptions")

    def __init__(self, entry: SessionEntry) -> None:
        self.pk = entry.pk
        self.key = entry.key
        self.protocol_version = entry.protocol_version
        self.log_level: str | None = entry.log_level
        self.subscriptions: frozenset[str] = entry.subscriptions
        self.client_capabilities = entry.client_capabilities

    async def set_log_level(self, level: str) -> None:
        await database_sync_to_async(self._set_log_level)(level)
        self.log_level = level

    async def subscribe(self, uri: str) -> None:
        self.subscriptions = await database_sync_to_async(self._change)(uri, add=True)

    async def unsubscribe(self, uri: str) -> None:
        self.subscriptions = await database_sync_to_async(self._change)(uri, add=False)

    async def reload_subscriptions(self) -> frozenset[str]:
        """Subscriptions may change on any process; a stream re-reads them before filtering an update."""
        stored = await database_sync_to_async(
            lambda: McpSession.objects.filter(pk=self.pk).values_list("subscriptions", flat=True).first()
        )()
        self.subscriptions = frozenset(stored or ())
        return self.subscriptions

    async def terminate(self) -> None:
        await database_sync_to_async(lambda: McpSession.objects.get(pk=self.pk).terminate())()

    def _set_log_level(self, level: str) -> None:
        McpSession.objects.filter(pk=self.pk).update(log_level=level)
        invalidation.publish(f"session:{self.pk}")

    def _change(self, uri: str, *, add: bool) -> frozenset[str]:
        with transaction.atomic():
            session = McpSession.objects.select_for_update().only("subscriptions").get(pk=self.pk)
            stored = set(session.subscriptions or ())
            current = stored | {uri} if add else stored - {uri}
            session.subscriptions = sorted(current)
            session.save(update_fields=["subscriptions"])  # post_save publishes the session's invalidation
        return frozenset(current)


def open_session(server_pk: int, agent_pk: int, protocol_version: str, params: dict[str, object]) -> str:
    """Record the session an ``initialize`` negotiated; return the raw id for the ``Mcp-Session-Id`` header.
    The new session goes straight into this process's cache: its next request needs no query."""
    generation = invalidation.generation()
    session, raw = McpSession.objects.open_session(
        server_id=server_pk,
        agent_id=agent_pk,
        protocol_version=protocol_version,
        client_info=params.get("clientInfo"),
        client_capabilities=params.get("capabilities"),
    )
    identity.remember_session(identity.session_entry(session), generation)
    return raw
