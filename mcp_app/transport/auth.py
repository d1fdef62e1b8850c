"""Authentication and authorisation of one request: token → agent → server → scope.

``authorize`` runs in a worker thread (it queries the database) and either returns an ``AccessGrant`` or raises
``AccessDenied`` with the HTTP status to answer. The order of checks is the contract:

1. ``agentId`` query parameter missing → 400
2. ``Authorization`` missing → 401; malformed, unknown, expired or revoked token, inactive agent → 401
3. token of another agent than ``agentId`` (existing or not) → 403
4. server unknown, disabled, of an inactive tenant, or of another tenant → 404 (indistinguishable)
5. token not scoped to this server → 403

The catalog of the returned grant is the token's view of the server's catalog (``mcp_app.catalog.grants``).

Unauthenticated callers learn nothing about which servers exist. The raw token is never logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..catalog.grants import granted_catalog
from ..catalog.resolver import resolve_catalog
from ..conf import mcp_settings
from ..models import AgentToken, McpServer
from ..protocol.context import Principal, RequestContext, ServerCatalog, ServerDescription
from ..runtime.audit import request_audit

REALM = "mcp-host"


class AccessDenied(Exception):
    def __init__(self, status: int, message: str, *, error: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error = error

    @property
    def www_authenticate(self) -> str | None:
        if self.status == 401:
            if self.error:
                return f'Bearer realm="{REALM}", error="{self.error}"'
            return f'Bearer realm="{REALM}"'
        if self.status == 403 and self.error:
            return f'Bearer realm="{REALM}", error="{self.error}"'
        return None


@dataclass(frozen=True)
class AccessGrant:
    server: McpServer
    token: AgentToken
    catalog: ServerCatalog

    @property
    def tenant_slug(self) -> str:
        return self.server.tenant.slug

    @property
    def agent_id(self) -> str:
        return self.token.agent.agent_id

    def request_context(self, **fields: Any) -> RequestContext:
        """The handlers' context for one request under this grant (the consumer and the admin's console)."""
        server = self.server
        return RequestContext(
            server=ServerDescription(
                server_id=server.server_id,
                name=server.name,
                title=server.title,
                version=server.version,
                instructions=server.instructions,
                protocol_versions=server.supported_versions,
            ),
            catalog=self.catalog,
            principal=Principal(tenant=self.tenant_slug, agent_id=self.agent_id),
            page_size=mcp_settings.PAGE_SIZE,
            # Audit hook: buffers one record per tools/call in memory (no query); written off the path.
            audit=request_audit(server, self.token, fields["era"], fields["protocol_version"]),
            **fields,
        )


def bearer_token(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return ""
    return credentials.strip()


def authorize(server_id: str, agent_id: str | None, authorization: str | None) -> AccessGrant:
    if not agent_id:
        raise AccessDenied(400, "The agentId query parameter is required.")
    raw = bearer_token(authorization)
    if raw is None:
        raise AccessDenied(401, "Authorization: Bearer <token> is required.")
    token = AgentToken.objects.authenticate(raw) if raw else None
    if token is None:
        raise AccessDenied(401, "The token is invalid, expired or revoked.", error="invalid_token")
    if token.agent.agent_id != agent_id:
        raise AccessDenied(403, "The token does not belong to this agent.", error="insufficient_scope")
    grant = grant_for_token(token, server_id)
    token.touch(mcp_settings.TOKEN_LAST_USED_INTERVAL_SECONDS)
    return grant


def grant_for_token(token: AgentToken, server_id: str) -> AccessGrant:
    """Steps 4 and 5 for an authenticated token: what it may use on ``server_id``. The admin's console enters
    here with a token it looked up itself, so both see the same server, scope and catalog."""
    server = McpServer.objects.for_token(server_id, token.agent.tenant_id, token.pk)
    if server is None:
        raise AccessDenied(404, "MCP server not found.")
    if not server.in_scope:  # type: ignore[attr-defined]
        raise AccessDenied(403, "The token is not allowed to use this server.", error="insufficient_scope")
    # The token's grant narrows the server's catalog here, once: every method reads this view.
    catalog = granted_catalog(server, resolve_catalog(server), AgentToken.objects.catalog_grant(token))
    return AccessGrant(server=server, token=token, catalog=catalog)
