"""Authentication and authorisation of one request: token → agent → server → scope (and, in the handshake era,
the session named by ``Mcp-Session-Id``).

``Credentials.admit`` (from the per-process caches when it can), ``Credentials.recheck`` (an open stream) and
``grant_for_token`` (the admin's console) return an ``AccessGrant`` or raise ``AccessDenied`` with the HTTP
status and its ``WWW-Authenticate`` challenge. The raw token is never logged; only its digest is looked up,
compared in constant time. The order of checks is the contract: docs/architecture.md ("Authentication").
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.utils import timezone

from .. import services
from ..caching import identity, writebehind
from ..caching.identity import CacheMiss, ServerEntry, SessionEntry, TokenEntry
from ..catalog.resolver import resolve_catalog
from ..limits import bruteforce
from ..models.agents import TOKEN_SCHEME, token_digest
from ..models.sessions import session_digest
from ..protocol.context import RequestContext
from ..protocol.descriptors import ServerCatalog
from .sessions import DatabaseSession, session_alive

REALM = "mcp-host"
OAUTH_SCOPE = "mcp"  # mcp_app.oauth.provider.SCOPE


class AccessDenied(Exception):
    def __init__(self, status: int, message: str, *, error: str | None = None, resource_metadata: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error = error
        # Whether the challenge names the server's RFC 9728 metadata (OAuth on, or a server nobody may learn of).
        self.resource_metadata = resource_metadata

    def challenge(self, metadata_url: str | None) -> str | None:
        """The ``WWW-Authenticate`` value, naming ``metadata_url`` when this refusal advertises OAuth."""
        if self.status not in (401, 403) or (self.status == 403 and not self.error):
            return None
        parts = [f'realm="{REALM}"']
        if self.error:
            parts.append(f'error="{self.error}"')
        if self.status == 403 and self.error == "insufficient_scope":
            parts.append(f'scope="{OAUTH_SCOPE}"')
        if metadata_url and self.resource_metadata:
            parts.append(f'resource_metadata="{metadata_url}"')
        return "Bearer " + ", ".join(parts)


@dataclass(frozen=True)
class AccessGrant:
    server: ServerEntry
    token: TokenEntry
    catalog: ServerCatalog

    def request_context(self, *, era: str, protocol_version: str, **fields: Any) -> RequestContext:
        """The handlers' context for one request under this grant (``services.request_context``): no query."""
        return services.request_context(
            self.server, self.token, self.catalog, era=era, protocol_version=protocol_version, **fields
        )


def bearer_token(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return ""
    return credentials.strip()


def _token(raw: str, *, load: bool) -> TokenEntry | None:
    if not raw.startswith(f"{TOKEN_SCHEME}_") or len(raw) > 256 or bruteforce.unknown(raw):
        return None
    digest = token_digest(raw)
    entry = identity.token(digest, load=load)
    if entry is None or not hmac.compare_digest(entry.digest, digest):
        if load:
            bruteforce.remember_unknown(raw)  # its next use is refused without a query (a negative cache)
        return None
    return entry


class _Recheck(Exception):
    """A refusal decided on cached snapshots: confirmed against the database before it is answered."""


def _refuse(status: int, message: str, *, error: str | None = None, fresh: bool) -> NoReturn:
    """Refuse, on ``fresh`` rows; else raise ``_Recheck`` to confirm the refusal first."""
    if not fresh:
        raise _Recheck
    raise AccessDenied(status, message, error=error, resource_metadata=status == 401 or error == "insufficient_scope")


def _advertised(server_id: str, *, load: bool) -> bool:
    """Whether refusals at ``server_id`` point to its OAuth metadata: OAuth on, or no such server (which an
    unauthenticated caller must not be able to tell apart)."""
    entry = identity.server(server_id, load=load)
    return entry is None or entry.oauth_enabled


def authorize(server_id: str, agent_id: str | None, authorization: str | None, *, load: bool = True) -> AccessGrant:
    """Check the request's credentials against this server; ``load=False`` raises ``CacheMiss`` instead of
    querying. A refusal cached snapshots would give is confirmed on fresh rows first (``_Recheck``)."""
    raw = bearer_token(authorization)
    if raw is None:
        advertised = _advertised(server_id, load=load)
        if not agent_id and not advertised:
            raise AccessDenied(400, "The agentId query parameter is required.")
        raise AccessDenied(401, "Authorization: Bearer <token> is required.", resource_metadata=advertised)
    now = timezone.now()
    try:
        return _check(server_id, agent_id, raw, now, load=load, fresh=False)
    except _Recheck:
        if not load:
            raise CacheMiss("refusal") from None
        if raw.startswith(f"{TOKEN_SCHEME}_"):
            identity.tokens.discard(token_digest(raw))
        identity.servers.discard(server_id)
        return _check(server_id, agent_id, raw, now, load=True, fresh=True)


def _check(server_id: str, agent_id: str | None, raw: str, now: datetime, *, load: bool, fresh: bool) -> AccessGrant:
    token = _token(raw, load=load) if raw else None
    if token is not None and token.expired(now):
        identity.tokens.discard(token.digest)
        token = None
    if token is None:
        raise AccessDenied(
            401,
            "The token is invalid, expired or revoked.",
            error="invalid_token",
            resource_metadata=_advertised(server_id, load=load),
        )
    if not agent_id and not token.audience_bound:
        raise AccessDenied(400, "The agentId query parameter is required.")
    if agent_id and token.agent_id != agent_id:
        _refuse(403, "The token does not belong to this agent.", error="insufficient_scope", fresh=fresh)
    grant = _grant(token, server_id, load=load, fresh=fresh)
    writebehind.token_used(token, now)
    return grant


def _grant(token: TokenEntry, server_id: str, *, load: bool, fresh: bool) -> AccessGrant:
    """Steps 4 and 5 for an authenticated token: the server, the scope and the token's view of the catalog."""
    server = identity.server(server_id, load=load)
    if token.audience_bound and (server is None or server.pk not in token.servers or not server.oauth_enabled):
        # An OAuth access token is valid at exactly the server it was issued for (RFC 8707).
        _refuse(401, "The token was not issued for this server.", error="invalid_token", fresh=fresh)
    if server is None:
        raise AccessDenied(404, "MCP server not found.")
    if server.tenant_id != token.tenant_pk:
        _refuse(404, "MCP server not found.", fresh=fresh)
    if server.pk not in token.servers:
        _refuse(403, "The token is not allowed to use this server.", error="insufficient_scope", fresh=fresh)
    return AccessGrant(server=server, token=token, catalog=resolve_catalog(server, grant=token.grant, load=load))


def grant_for_token(token_digest_value: str, server_id: str) -> AccessGrant:
    """What the usable token with this digest may use on ``server_id``, checked like the wire (fresh rows): the
    admin's console enters here with a token it looked up itself, so both see the same server, scope and
    catalog. Raises ``AccessDenied`` as ``authorize`` would."""
    identity.tokens.discard(token_digest_value)
    token = identity.token(token_digest_value, load=True)
    if token is None or token.expired(timezone.now()):
        raise AccessDenied(401, "The token is invalid, expired or revoked.", error="invalid_token")
    identity.servers.discard(server_id)
    return _grant(token, server_id, load=True, fresh=True)


def _session(raw: str, grant: AccessGrant, *, load: bool) -> SessionEntry | None:
    if not raw or len(raw) > 256:
        return None
    entry = identity.session(session_digest(raw), load=load)
    if entry is None or entry.server_pk != grant.server.pk or entry.agent_pk != grant.token.agent_pk:
        return None
    now = timezone.now()
    if not session_alive(entry, now):
        # Idle as far as this process knows; another process may have seen it since: only the stored
        # activity decides.
        identity.sessions.discard(entry.digest)
        if not load:
            raise CacheMiss("sessions")
        return None
    writebehind.session_seen(entry, now)
    return entry


@dataclass(frozen=True, slots=True)
class Credentials:
    """What one request presents: the server its path names, ``agentId``, ``Authorization``, ``Mcp-Session-Id``."""

    server_id: str
    agent_id: str | None
    authorization: str | None
    session_id: str | None

    @classmethod
    def of(cls, scope: dict[str, Any], headers: dict[str, str]) -> Credentials:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        agent_id = (query.get("agentId") or [None])[0]
        server_id = scope["url_route"]["kwargs"]["server_id"]
        return cls(server_id, agent_id, headers.get("authorization"), headers.get("mcp-session-id"))

    async def admit(self) -> tuple[AccessGrant, DatabaseSession | None]:
        """Authorize, and resolve the named session (only handshake-era paths use it; the stateless era ignores
        it): from the caches when everything is there, else in one worker-thread call that loads what is
        missing."""
        try:
            return _admit(self, load=False)
        except CacheMiss:
            loaded: tuple[AccessGrant, DatabaseSession | None] = await database_sync_to_async(_admit)(self, load=True)
            return loaded

    async def recheck(self) -> AccessGrant | None:
        """The credentials checked again (an open stream's re-check, ``streams.Recheck``): the grant, or
        ``None`` when they are refused now or the session they named has ended."""
        try:
            grant, session = await self.admit()
        except AccessDenied:
            return None
        return None if self.session_id is not None and session is None else grant


def _admit(credentials: Credentials, *, load: bool) -> tuple[AccessGrant, DatabaseSession | None]:
    grant = authorize(credentials.server_id, credentials.agent_id, credentials.authorization, load=load)
    session_id = credentials.session_id
    entry = _session(session_id, grant, load=load) if session_id is not None else None
    return grant, DatabaseSession(entry) if entry is not None else None
