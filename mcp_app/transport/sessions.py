"""The database-backed ``Session`` the handlers see, and the session part of request admission.

Handlers change a session through ``DatabaseSession`` (log level, resource subscriptions); each verb is one
UPDATE from a worker thread. ``key`` names the session in channel-layer groups without revealing its id.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.db import transaction

from ..conf import mcp_settings
from ..models import Agent, McpServer, McpSession

TOUCH_INTERVAL_SECONDS = 30


class DatabaseSession:
    def __init__(self, session: McpSession) -> None:
        self._pk = session.pk
        self.key = session.digest[:32]
        self.protocol_version = session.protocol_version
        self.log_level: str | None = session.log_level or None
        self.subscriptions: frozenset[str] = frozenset(session.subscriptions or ())
        self.client_capabilities = session.client_capabilities or {}

    async def set_log_level(self, level: str) -> None:
        await database_sync_to_async(McpSession.objects.filter(pk=self._pk).update)(log_level=level)
        self.log_level = level

    async def subscribe(self, uri: str) -> None:
        self.subscriptions = await database_sync_to_async(self._change)(uri, add=True)

    async def unsubscribe(self, uri: str) -> None:
        self.subscriptions = await database_sync_to_async(self._change)(uri, add=False)

    async def reload_subscriptions(self) -> frozenset[str]:
        """Subscriptions may change on any process; a stream re-reads them before filtering an update."""
        stored = await database_sync_to_async(
            lambda: McpSession.objects.filter(pk=self._pk).values_list("subscriptions", flat=True).first()
        )()
        self.subscriptions = frozenset(stored or ())
        return self.subscriptions

    async def terminate(self) -> None:
        await database_sync_to_async(lambda: McpSession.objects.get(pk=self._pk).terminate())()

    def _change(self, uri: str, *, add: bool) -> frozenset[str]:
        with transaction.atomic():
            session = McpSession.objects.select_for_update().only("subscriptions").get(pk=self._pk)
            current = set(session.subscriptions or ())
            if add:
                current.add(uri)
            else:
                current.discard(uri)
            session.subscriptions = sorted(current)
            session.save(update_fields=["subscriptions"])
        return frozenset(current)


def open_session(server: McpServer, agent: Agent, protocol_version: str, params: dict[str, object]) -> str:
    """Record the session an ``initialize`` negotiated; return the raw id for the ``Mcp-Session-Id`` header."""
    _session, raw = McpSession.objects.open_session(
        server=server,
        agent=agent,
        protocol_version=protocol_version,
        client_info=params.get("clientInfo"),
        client_capabilities=params.get("capabilities"),
    )
    return raw


def resolve_session(raw: str, server: McpServer, agent: Agent) -> DatabaseSession | None:
    session = McpSession.objects.resolve(
        raw, server=server, agent=agent, idle_seconds=mcp_settings.SESSION_IDLE_SECONDS
    )
    if session is None:
        return None
    session.touch(TOUCH_INTERVAL_SECONDS)
    return DatabaseSession(session)
