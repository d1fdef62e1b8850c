"""Handshake-era sessions, in the database so that any process serves any session: only the digest of the raw
``Mcp-Session-Id`` is stored; a session is its server's and agent's, and ends after ``SESSION_IDLE_SECONDS`` idle
or at DELETE. Not here: resolving a request's session (``mcp_app.transport.sessions``).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.utils import timezone

from ..invalidation import publish
from .agents import Agent
from .credentials import credential_digest
from .servers import McpServer

SESSION_BYTES = 32


session_digest = credential_digest  # a session id is stored as its digest, as bearer credentials are


class McpSessionManager(models.Manager["McpSession"]):
    def open_session(
        self,
        *,
        server: McpServer | None = None,
        agent: Agent | None = None,
        server_id: int | None = None,
        agent_id: int | None = None,
        protocol_version: str,
        client_info: Any = None,
        client_capabilities: Any = None,
    ) -> tuple[McpSession, str]:
        """Open a session for a server and an agent (instances, or their primary keys)."""
        raw = secrets.token_urlsafe(SESSION_BYTES)
        session = self.create(
            digest=session_digest(raw),
            # Instances when given (they stay loaded on the new row), else primary keys.
            **({"server": server} if server is not None else {"server_id": server_id}),
            **({"agent": agent} if agent is not None else {"agent_id": agent_id}),
            protocol_version=protocol_version,
            client_info=client_info if isinstance(client_info, dict) else None,
            client_capabilities=client_capabilities if isinstance(client_capabilities, dict) else {},
        )
        return session, raw

    def delete_expired(self, idle_seconds: float, now: datetime | None = None) -> int:
        """Remove sessions idle past the limit or terminated; returns how many rows went."""
        now = now or timezone.now()
        expired = self.filter(
            models.Q(last_seen_at__lte=now - timedelta(seconds=idle_seconds)) | models.Q(terminated_at__isnull=False)
        )
        count, _ = expired.delete()
        return count


class McpSession(models.Model):
    """State a handshake-era client negotiated with one server."""

    digest = models.CharField("SHA-256 digest of the session id", max_length=64, unique=True, editable=False)
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="sessions", verbose_name="server")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions", verbose_name="agent")
    protocol_version = models.CharField("protocol version", max_length=20)
    client_info = models.JSONField("client info", null=True, blank=True)
    client_capabilities = models.JSONField("client capabilities", default=dict, blank=True)
    log_level = models.CharField("log level", max_length=16, blank=True, help_text="Set by logging/setLevel.")
    subscriptions = models.JSONField("resource subscriptions", default=list, blank=True)
    created_at = models.DateTimeField("created", auto_now_add=True)
    last_seen_at = models.DateTimeField("last seen", default=timezone.now)
    terminated_at = models.DateTimeField("terminated", null=True, blank=True)

    objects = McpSessionManager()

    class Meta:
        verbose_name = "MCP session"
        verbose_name_plural = "MCP sessions"
        ordering = ("-last_seen_at",)
        indexes = [models.Index(fields=("last_seen_at",), name="mcp_session_last_seen")]

    def __str__(self) -> str:
        return f"session {self.digest[:8]}… ({self.protocol_version})"

    def terminate(self) -> None:
        """End the session on every process (DELETE, or an operator)."""
        type(self).objects.filter(pk=self.pk, terminated_at__isnull=True).update(terminated_at=timezone.now())
        publish(f"session:{self.pk}")
