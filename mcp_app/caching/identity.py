"""Per-process snapshots of who calls and what they call: tokens, servers and sessions (docs/architecture.md,
"A warm request does no database work and no thread hop").

Each snapshot is plain data loaded by the ORM on a miss, kept in a bounded LRU and tagged with the invalidation
keys that drop it: ``TokenEntry`` by token digest (only usable tokens of active agents, an OAuth token only while
its person may use its consent), ``ServerEntry`` by ``server_id`` (servable servers), ``SessionEntry`` by session
digest (live sessions). An entry older than ``IDENTITY_CACHE_MAX_AGE_SECONDS`` is loaded again; nothing is cached
while ``invalidation.healthy()`` is false. Lookups with ``load=False`` never touch the database: they raise
``CacheMiss``, and the caller retries in a worker thread with ``load=True``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import invalidation
from ..conf import mcp_settings
from ..protocol.descriptors import ServerDescription

if TYPE_CHECKING:
    from ..models.agents import CatalogGrant
    from ..models.servers import McpServer
    from ..models.usage import BudgetLimit

T = TypeVar("T")


class CacheMiss(Exception):
    """The answer is not in this process's caches; ask again with ``load=True`` from a worker thread."""


class EntryCache(Generic[T]):
    """A bounded, thread-safe LRU of tagged snapshots that follows the invalidation log."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: OrderedDict[Hashable, tuple[T, Collection[str], float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        invalidation.register(self._invalidate)

    def get(self, key: Hashable) -> T | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                if (
                    time.monotonic() - found[2] < float(mcp_settings.IDENTITY_CACHE_MAX_AGE_SECONDS)
                    and invalidation.healthy()
                ):
                    self._entries.move_to_end(key)
                    self.hits += 1
                    return found[0]
                del self._entries[key]
            self.misses += 1
            return None

    def put(self, key: Hashable, value: T, tags: Collection[str], loaded_at_generation: int) -> None:
        if not invalidation.store_allowed(loaded_at_generation):
            return
        with self._lock:
            if loaded_at_generation != invalidation.generation():
                return
            self._entries[key] = (value, tags, time.monotonic())
            self._entries.move_to_end(key)
            while len(self._entries) > mcp_settings.IDENTITY_CACHE_SIZE:
                self._entries.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _invalidate(self, keys: frozenset[str] | None) -> None:
        with self._lock:
            if keys is None:
                self._entries.clear()
                return
            for key in [key for key, (_value, tags, _at) in self._entries.items() if not keys.isdisjoint(tags)]:
                del self._entries[key]


@dataclass(eq=False)
class TokenEntry:
    pk: int
    digest: str
    prefix: str
    agent_pk: int
    agent_id: str
    tenant_pk: int
    tenant_slug: str
    expires_at: datetime | None
    servers: frozenset[int]
    # What this token may see and do beyond its server scope (``mcp_app.catalog.grants``); hashable, part of the
    # catalog view's cache key. ``None``: everything its servers expose.
    grant: CatalogGrant | None = None
    # The tenant's and the agent's own ``max_worker_calls`` (``None``: the WORKER_CALLS_PER_* setting applies);
    # ``mcp_app.limits.quotas.limits_for`` turns them into effective limits without a query.
    tenant_max_worker_calls: int | None = None
    agent_max_worker_calls: int | None = None
    # The tenant's and the agent's own (rate_limit, rate_burst) (``mcp_app.limits.rates``; None: the settings).
    tenant_rate: tuple[float | None, int | None] = (None, None)
    agent_rate: tuple[float | None, int | None] = (None, None)
    # Every limit of every budget that applies to the token (its tenant's and its agent's, of operators and of
    # the tenant's admins: ``Budget.objects.limits_for``), and the tenant's time zone, whose days and months they
    # count (``mcp_app.limits.budgets``). A change of a budget or of the tenant publishes ``tenant:<pk>``.
    budgets: tuple[BudgetLimit, ...] = ()
    time_zone: str = "UTC"
    # The last-used stamp as this process knows it (stored value, then what it queued for writing).
    last_used_at: datetime | None = field(default=None, compare=False)
    # An OAuth access token's mirror (``mcp_app.models.oauth``): needs no ``agentId``, valid at its one server.
    audience_bound: bool = False

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True, eq=False)
class ServerEntry:
    pk: int
    server_id: str
    tenant_id: int
    tenant_slug: str
    name: str
    title: str
    version: str
    instructions: str
    allowed_origins: tuple[str, ...]
    supported_versions: tuple[str, ...]
    sessions_required: bool
    catalog_version: int
    created_at: datetime
    # Accepts and advertises OAuth access tokens (``McpServer.oauth_enabled``).
    oauth_enabled: bool = True
    # The tenant's time zone (``Tenant.time_zone``): whose day a call's usage counts in.
    time_zone: str = "UTC"

    @classmethod
    def of(cls, row: McpServer) -> ServerEntry:
        """The entry of a server row loaded with its tenant: its fields of the same names, and three derived."""
        derived: dict[str, Any] = {
            "tenant_slug": row.tenant.slug,
            "allowed_origins": tuple(row.allowed_origins or ()),
            "time_zone": row.tenant.time_zone,
        }
        names = [entry_field.name for entry_field in fields(cls) if entry_field.name not in derived]
        return cls(**{name: getattr(row, name) for name in names}, **derived)

    def description(self) -> ServerDescription:
        """The server as the protocol core describes it to a request, with the catalog revision it serves (made
        once per entry: both are immutable)."""
        made: ServerDescription | None = self.__dict__.get("_description")
        if made is None:
            made = self.__dict__["_description"] = self._describe()
        return made

    def _describe(self) -> ServerDescription:
        return ServerDescription(
            server_id=self.server_id,
            name=self.name,
            title=self.title,
            version=self.version,
            instructions=self.instructions,
            protocol_versions=self.supported_versions,
            pk=self.pk,
            revision=(self.catalog_version, self.created_at.isoformat()),
        )


@dataclass(eq=False, slots=True)
class SessionEntry:
    pk: int
    digest: str
    server_pk: int
    agent_pk: int
    protocol_version: str
    log_level: str | None
    subscriptions: frozenset[str]
    client_capabilities: dict[str, object]
    # Latest activity this process knows of: the stored value, raised by every request it serves.
    last_seen_at: datetime
    # What the database holds (or what this process has queued for it).
    stored_seen_at: datetime

    @property
    def key(self) -> str:
        return self.digest[:32]


NO_SUBSCRIPTIONS: frozenset[str] = frozenset()  # shared by the sessions without any (most)

tokens: EntryCache[TokenEntry] = EntryCache("tokens")
servers: EntryCache[ServerEntry] = EntryCache("servers")
sessions: EntryCache[SessionEntry] = EntryCache("sessions")


def clear() -> None:
    for cache in (tokens, servers, sessions):
        cache.clear()


def _cached(cache: EntryCache[T], key: Hashable, load: bool, loader: Callable[[int], T | None]) -> T | None:
    found = cache.get(key)
    if found is not None:
        return found
    if not load:
        raise CacheMiss(cache.name)
    return loader(invalidation.generation())


def token(digest: str, *, load: bool) -> TokenEntry | None:
    """The usable token with this digest (agent active), or ``None``."""

    def from_database(generation: int) -> TokenEntry | None:
        from ..models import AgentToken, Budget

        row = (
            AgentToken.objects.usable()
            .filter(digest=digest, agent__is_active=True)
            .select_related("agent__tenant")
            .first()
        )
        if row is None or (row.oauth_consent_id is not None and not oauth_consent_usable(row.oauth_consent_id)):
            return None
        entry = TokenEntry(
            pk=row.pk,
            digest=row.digest,
            prefix=row.prefix,
            agent_pk=row.agent_id,
            agent_id=row.agent.agent_id,
            tenant_pk=row.agent.tenant_id,
            tenant_slug=row.agent.tenant.slug,
            expires_at=row.expires_at,
            servers=frozenset(row.servers.values_list("pk", flat=True)),
            grant=token_grant(row),
            tenant_max_worker_calls=row.agent.tenant.max_worker_calls,
            agent_max_worker_calls=row.agent.max_worker_calls,
            tenant_rate=(row.agent.tenant.rate_limit, row.agent.tenant.rate_burst),
            agent_rate=(row.agent.rate_limit, row.agent.rate_burst),
            budgets=Budget.objects.limits_for(row.agent.tenant_id, row.agent_id),
            time_zone=row.agent.tenant.time_zone,
            last_used_at=row.last_used_at,
            audience_bound=row.oauth_consent_id is not None,
        )
        tags = frozenset({f"token:{entry.pk}", f"agent:{entry.agent_pk}", f"tenant:{entry.tenant_pk}"})
        tokens.put(digest, entry, tags, generation)
        return entry

    return _cached(tokens, digest, load, from_database)


def oauth_consent_usable(consent_pk: int) -> bool:
    """Whether the person behind an OAuth token's consent may still use it (``mcp_app.models.oauth``,
    *Eligibility*): one query, on the cold path of OAuth tokens only. The signals that end eligibility revoke
    the token at once; this catches changes that sent none (a queryset ``update()``) within the cache's maximum
    age."""
    from ..models import OAuthConsent

    return not OAuthConsent.objects.get_queryset().filter(pk=consent_pk).ineligible().exists()


def token_grant(row: Any) -> CatalogGrant:
    """The grant part of a token's snapshot (``AgentToken.objects.catalog_grant``: no query for an unlimited
    token, one for a limited one); hashable, part of the catalog view's cache key. Loaded with the token on the
    cold path only."""
    from ..models import AgentToken

    return AgentToken.objects.catalog_grant(row)


def server(server_id: str, *, load: bool) -> ServerEntry | None:
    """The servable server ``server_id`` (enabled, of an active tenant), or ``None``."""

    def from_database(generation: int) -> ServerEntry | None:
        from ..models import McpServer

        row = McpServer.objects.servable().filter(server_id=server_id).select_related("tenant").first()
        if row is None:
            return None
        entry = ServerEntry.of(row)
        servers.put(server_id, entry, frozenset({f"server:{entry.pk}", f"tenant:{entry.tenant_id}"}), generation)
        return entry

    return _cached(servers, server_id, load, from_database)


def session(digest: str, *, load: bool) -> SessionEntry | None:
    """The session with this digest, unless terminated (the caller checks owner and idle time), or ``None``."""

    def from_database(generation: int) -> SessionEntry | None:
        from ..models import McpSession

        row = McpSession.objects.filter(digest=digest, terminated_at__isnull=True).first()
        if row is None:
            return None
        entry = session_entry(row)
        remember_session(entry, generation)
        return entry

    return _cached(sessions, digest, load, from_database)


def session_entry(row: object) -> SessionEntry:
    from ..models import McpSession

    assert isinstance(row, McpSession)
    return SessionEntry(
        pk=row.pk,
        digest=row.digest,
        server_pk=row.server_id,
        agent_pk=row.agent_id,
        protocol_version=row.protocol_version,
        log_level=row.log_level or None,
        subscriptions=frozenset(row.subscriptions) if row.subscriptions else NO_SUBSCRIPTIONS,
        client_capabilities=row.client_capabilities or {},
        last_seen_at=row.last_seen_at,
        stored_seen_at=row.last_seen_at,
    )


def remember_session(entry: SessionEntry, generation: int) -> None:
    # A tuple: a cached session per live session, and a frozenset of three costs 216 bytes.
    tags = (f"session:{entry.pk}", f"server:{entry.server_pk}", f"agent:{entry.agent_pk}")
    sessions.put(entry.digest, entry, tags, generation)
