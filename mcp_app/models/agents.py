"""Agents (machine principals) and their bearer tokens.

A raw token is a credential of scheme ``mcp`` (``mcp_<prefix>_<secret>``, stored only as its digest:
``models.credentials``), returned once by ``issue_token``; ``AgentToken.objects.authenticate`` resolves one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from ..invalidation import publish
from .catalog import Prompt, Resource, Tool
from .credentials import Credential, CredentialManager, CredentialQuerySet, credential_digest, prefix_field
from .limits import rate_burst_field, rate_limit_field
from .servers import McpServer
from .tenancy import Tenant

TOKEN_SCHEME = "mcp"  # noqa: S105  (a prefix, not a secret)


@dataclass(frozen=True, slots=True)
class CatalogGrant:
    """What of its servers' catalogs a token may see and use (see ``mcp_app.catalog.grants``).

    ``tools``, ``resources`` and ``prompts`` are sets of catalog row ids, or ``None`` for "all of them";
    ``read_only`` keeps only tools annotated ``readOnlyHint: true``. The value is hashable: it is a cache key.
    """

    tools: frozenset[int] | None = None
    resources: frozenset[int] | None = None
    prompts: frozenset[int] | None = None
    read_only: bool = False

    @property
    def is_full(self) -> bool:
        return self.tools is None and self.resources is None and self.prompts is None and not self.read_only


FULL_GRANT = CatalogGrant()
#: The many-to-many fields of a grant (of a token, of an OAuth consent), in the order tools, resources, prompts.
GRANT_RELATIONS = ("granted_tools", "granted_resources", "granted_prompts")


token_digest = credential_digest  # the request path looks tokens up by digest (mcp_app.caching.identity)


class Agent(models.Model):
    """A bot, IDE or LLM application that calls MCP servers; distinct from the humans who administer it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents", verbose_name="tenant")
    agent_id = models.SlugField(
        "agent id", max_length=63, help_text="Identifier the agent sends as ?agentId=; unique within the tenant."
    )
    name = models.CharField("name", max_length=200)
    is_active = models.BooleanField("active", default=True, help_text="An inactive agent's tokens stop working.")
    max_worker_calls = models.PositiveIntegerField(
        "concurrent worker calls",
        null=True,
        blank=True,
        help_text="At most this many worker calls of this agent run at once; empty: the WORKER_CALLS_PER_AGENT setting.",
    )
    rate_limit = rate_limit_field("agent")
    rate_burst = rate_burst_field("agent")
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        verbose_name = "agent"
        verbose_name_plural = "agents"
        ordering = ("tenant", "agent_id")
        constraints = [models.UniqueConstraint(fields=("tenant", "agent_id"), name="mcp_agent_unique_per_tenant")]

    def __str__(self) -> str:
        return f"{self.agent_id} ({self.tenant.slug})"


class AgentTokenQuerySet(CredentialQuerySet["AgentToken"]):
    def revoke(self) -> int:
        """Revoke every token of this queryset not revoked yet; every process stops accepting them."""
        pks = list(self.filter(revoked_at__isnull=True).values_list("pk", flat=True))
        count = type(self)(self.model, using=self.db).filter(pk__in=pks).update(revoked_at=timezone.now())
        publish(*(f"token:{pk}" for pk in pks))
        return count


class AgentTokenManager(CredentialManager["AgentToken"]):
    scheme = TOKEN_SCHEME

    def get_queryset(self) -> AgentTokenQuerySet:
        return AgentTokenQuerySet(self.model, using=self._db)

    def usable(self, now: datetime | None = None) -> AgentTokenQuerySet:
        return self.get_queryset().usable(now)

    def issue_token(
        self,
        agent: Agent,
        *,
        servers: list[McpServer] | None = None,
        name: str = "",
        expires_at: datetime | None = None,
        tools: list[Tool] | None = None,
        resources: list[Resource] | None = None,
        prompts: list[Prompt] | None = None,
        read_only: bool = False,
    ) -> tuple[AgentToken, str]:
        """Create a token for ``agent`` scoped to ``servers``; return it with the raw value (shown only once).

        Passing any of ``tools``, ``resources`` or ``prompts`` (even empty) limits the token to exactly the
        entries passed; ``read_only`` limits it to read-only tools."""
        foreign = self.outside_tenant(
            agent, {"servers": servers, "entries": [*(tools or ()), *(resources or ()), *(prompts or ())]}
        )
        if "servers" in foreign:
            raise ValueError("a token can only be scoped to servers of its agent's tenant")
        if "entries" in foreign:
            raise ValueError("a token can only be granted catalog entries of its agent's tenant")
        limited = tools is not None or resources is not None or prompts is not None
        raw, prefix, digest = self.mint()
        token = self.create(
            agent=agent,
            name=name,
            prefix=prefix,
            digest=digest,
            expires_at=expires_at,
            limit_to_grant=limited,
            read_only=read_only,
        )
        for relation, chosen in (("servers", servers), *zip(GRANT_RELATIONS, (tools, resources, prompts), strict=True)):
            if chosen:
                getattr(token, relation).set(chosen)
        return token, raw

    def outside_tenant(self, agent: Agent, chosen: Mapping[str, Iterable[Any] | None]) -> dict[str, list[Any]]:
        """By name, the servers or catalog entries in ``chosen`` that are not of ``agent``'s tenant. A token is
        scoped and granted within its agent's tenant only: the rule of ``issue_token``, the admin and the API."""
        return {
            name: foreign
            for name, objects in chosen.items()
            if (foreign := [obj for obj in objects or () if obj.tenant_id != agent.tenant_id])
        }

    def catalog_grant(self, token: AgentToken) -> CatalogGrant:
        """The token's grant (the request path reads it from its cached token snapshot)."""
        if not token.limit_to_grant:
            return CatalogGrant(read_only=True) if token.read_only else FULL_GRANT
        tools, resources, prompts = (
            frozenset(getattr(token, name).values_list("pk", flat=True)) for name in GRANT_RELATIONS
        )
        return CatalogGrant(tools, resources, prompts, read_only=token.read_only)

    def authenticate(self, raw: str) -> AgentToken | None:
        """The usable token of an active agent whose digest matches ``raw`` (``match``), with agent and tenant
        loaded, or ``None``. A token of an inactive tenant does authenticate: its servers are not servable (404).
        The request path uses the cached snapshot of ``mcp_app.caching.identity`` instead."""
        return self.match(raw, self.usable().filter(agent__is_active=True).select_related("agent__tenant"))


class AgentToken(Credential):
    """A bearer credential of one agent, stored as a digest, scoped to some of the tenant's servers."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens", verbose_name="agent")
    name = models.CharField("name", max_length=200, blank=True, help_text="What this token is for.")
    prefix = prefix_field("token")
    servers = models.ManyToManyField(
        McpServer, related_name="tokens", blank=True, verbose_name="servers", help_text="Servers this token may call."
    )
    # The grant: which catalog rows (not exposed names, so renaming a binding neither widens nor narrows it).
    limit_to_grant = models.BooleanField(
        "limit to granted entries",
        default=False,
        help_text="Only the tools, resources and prompts chosen below are visible; others look unknown.",
    )
    granted_tools = models.ManyToManyField(
        Tool, related_name="granted_tokens", blank=True, verbose_name="granted tools"
    )
    granted_resources = models.ManyToManyField(
        Resource, related_name="granted_tokens", blank=True, verbose_name="granted resources"
    )
    granted_prompts = models.ManyToManyField(
        Prompt, related_name="granted_tokens", blank=True, verbose_name="granted prompts"
    )
    read_only = models.BooleanField(
        "read-only tools", default=False, help_text="Only tools annotated readOnlyHint: true are visible."
    )
    # An OAuth access token's mirror (``mcp_app.models.oauth``): valid without ``agentId``, at its one server only.
    oauth_consent = models.ForeignKey(
        "mcp_app.OAuthConsent",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        editable=False,
        related_name="tokens",
        verbose_name="OAuth consent",
    )
    # digest, created_at, expires_at, revoked_at, last_used_at: see Credential.

    objects = AgentTokenManager()

    class Meta:
        verbose_name = "agent token"
        verbose_name_plural = "agent tokens"
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{TOKEN_SCHEME}_{self.prefix}_… ({self.agent.agent_id})"

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
