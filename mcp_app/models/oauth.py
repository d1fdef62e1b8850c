"""OAuth 2.1 state on top of django-oauth-toolkit's clients and tokens: ``OAuthAgent`` (a person's agent for one
client in one tenant), ``OAuthConsent`` (what they allowed a client on one server; its access tokens mirrored as
``AgentToken`` rows), ``OAuthClientProfile`` (what a client states about itself) and ``may_consent``
(eligibility). Design: docs/oauth.md ("How mcp_app.oauth is built").
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q

from ..conf import mcp_settings
from .agents import GRANT_RELATIONS, Agent, AgentToken
from .catalog import Prompt, Resource, Tool
from .servers import McpServer
from .tenancy import Tenant, TenantMembership

# DOT's client model (not swapped: mcp-host uses DOT's own).
APPLICATION_MODEL = "oauth2_provider.Application"


class OAuthAgentManager(models.Manager["OAuthAgent"]):
    def for_consent(self, user: Any, application: Any, tenant: Tenant) -> Agent:
        """The agent of (user, client, tenant), created (active) on first use."""
        link = self.filter(user=user, application=application, tenant=tenant).select_related("agent").first()
        if link is not None:
            return link.agent
        agent = Agent.objects.create(
            tenant=tenant,
            agent_id=f"oauth-{application.pk}-{user.pk}",
            name=f"{(application.name or 'OAuth client')[:120]} for {user.get_username()}"[:200],
        )
        self.create(agent=agent, user=user, application=application, tenant=tenant)
        return agent


class OAuthAgent(models.Model):
    """The agent behind one person's use of one OAuth client in one tenant."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="oauth", verbose_name="agent")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="oauth_agents", verbose_name="tenant")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_oauth_agents", verbose_name="user"
    )
    application = models.ForeignKey(
        APPLICATION_MODEL,
        on_delete=models.CASCADE,
        related_name="mcp_agents",
        verbose_name="OAuth client",
        swappable=False,
    )
    created_at = models.DateTimeField("created", auto_now_add=True)

    objects = OAuthAgentManager()

    class Meta:
        verbose_name = "OAuth agent"
        verbose_name_plural = "OAuth agents"
        constraints = [models.UniqueConstraint(fields=("tenant", "user", "application"), name="mcp_oauth_agent_unique")]

    def __str__(self) -> str:
        return f"{self.agent.agent_id} ({self.tenant.slug})"


class OAuthClientProfileManager(models.Manager["OAuthClientProfile"]):
    def remember(self, client_id: str, metadata: Any) -> None:
        """Keep what a client says about itself (RFC 7591 registration or metadata document): only http(s) URLs."""
        if not isinstance(metadata, dict):
            return

        def url(key: str) -> str:
            value = metadata.get(key)
            ok = isinstance(value, str) and value.startswith(("https://", "http://")) and len(value) <= 500
            return value if ok else ""  # type: ignore[return-value]

        self.update_or_create(
            client_id=client_id[:255], defaults={"client_uri": url("client_uri"), "logo_uri": url("logo_uri")}
        )


class OAuthClientProfile(models.Model):
    """What an OAuth client states about itself (home page, logo), shown on the consent page as not verified."""

    client_id = models.CharField("client id", max_length=255, unique=True)
    client_uri = models.URLField("client URL", max_length=500, blank=True)
    logo_uri = models.URLField("logo URL", max_length=500, blank=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = OAuthClientProfileManager()

    class Meta:
        verbose_name = "OAuth client profile"
        verbose_name_plural = "OAuth client profiles"

    def __str__(self) -> str:
        return self.client_id


def consent_roles() -> list[str]:
    """The tenant roles that may consent: ``OAUTH_CONSENT_ROLE`` and every role above it (``Role`` order)."""
    roles = [role.value for role in TenantMembership.Role]
    return roles[: roles.index(mcp_settings.OAUTH_CONSENT_ROLE) + 1]


def may_consent(user: Any, server: McpServer) -> bool:
    """Whether ``user`` may authorize clients for ``server`` and keep using the consents it gave: active, and a
    member with a consenting role, or the server opens consent to everyone."""
    if not (user.is_authenticated and user.is_active):
        return False
    if server.oauth_open_consent:
        return True
    return TenantMembership.objects.filter(user=user, tenant_id=server.tenant_id, role__in=consent_roles()).exists()


class OAuthConsentQuerySet(models.QuerySet["OAuthConsent"]):
    def ineligible(self) -> OAuthConsentQuerySet:
        """The consents whose person may no longer use them (``may_consent`` is false), in one query."""
        member = TenantMembership.objects.filter(
            user=OuterRef("user"), tenant=OuterRef("server__tenant"), role__in=consent_roles()
        )
        return self.exclude(Q(user__is_active=True) & (Q(server__oauth_open_consent=True) | Exists(member)))

    def withdraw(self) -> int:
        """Withdraw these consents: their tokens (DOT's and the mirrors) stop working on every process."""
        consents = list(self)
        for consent in consents:
            consent.withdraw()
        return len(consents)


class OAuthConsentManager(models.Manager["OAuthConsent"]):
    def get_queryset(self) -> OAuthConsentQuerySet:
        return OAuthConsentQuerySet(self.model, using=self._db)

    def record(
        self,
        user: Any,
        application: Any,
        server: McpServer,
        *,
        read_only: bool = False,
        tools: list[Tool] | None = None,
        resources: list[Resource] | None = None,
        prompts: list[Prompt] | None = None,
    ) -> OAuthConsent:
        """Remember (or replace) what ``user`` allows ``application`` on ``server``; creates the agent if needed.
        Tokens issued under an earlier consent keep their grant until they expire or are refreshed."""
        chosen = [*(tools or ()), *(resources or ()), *(prompts or ())]
        if any(entry.tenant_id != server.tenant_id for entry in chosen):
            raise ValueError("a consent can only grant catalog entries of the server's tenant")
        with transaction.atomic():
            agent = OAuthAgent.objects.for_consent(user, application, server.tenant)
            limited = tools is not None or resources is not None or prompts is not None
            consent, _ = self.update_or_create(
                user=user,
                application=application,
                server=server,
                defaults={"agent": agent, "read_only": read_only, "limit_to_grant": limited},
            )
            for relation, entries in zip(GRANT_RELATIONS, (tools, resources, prompts), strict=True):
                getattr(consent, relation).set(entries or [])
        return consent

    def end_ineligible(self, **filters: Any) -> int:
        """Revoke the tokens of the consents matching ``filters`` whose person is no longer eligible (membership
        removed or downgraded, open consent switched off, user deactivated); they stop working on every process
        within the invalidation bound. Returns how many consents lost their tokens."""
        ended = list(self.get_queryset().filter(**filters).ineligible().select_related("user", "application", "server"))
        for consent in ended:
            consent.revoke_tokens()
        return len(ended)

    def revoke_for(self, **filters: Any) -> None:
        """Revoke the mirrored tokens of the consents matching ``filters`` (``user=…``, ``application=…``)."""
        for consent in self.filter(**filters):
            consent.revoke_tokens()


class OAuthConsent(models.Model):
    """What one person allowed one OAuth client to use on one MCP server."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_oauth_consents", verbose_name="user"
    )
    application = models.ForeignKey(
        APPLICATION_MODEL,
        on_delete=models.CASCADE,
        related_name="mcp_consents",
        verbose_name="OAuth client",
        swappable=False,
    )
    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="oauth_consents", verbose_name="MCP server"
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="oauth_consents", verbose_name="agent")
    limit_to_grant = models.BooleanField("limit to granted entries", default=False)
    read_only = models.BooleanField("read-only tools", default=False)
    granted_tools = models.ManyToManyField(Tool, related_name="+", blank=True, verbose_name="granted tools")
    granted_resources = models.ManyToManyField(Resource, related_name="+", blank=True, verbose_name="granted resources")
    granted_prompts = models.ManyToManyField(Prompt, related_name="+", blank=True, verbose_name="granted prompts")
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = OAuthConsentManager()

    class Meta:
        verbose_name = "OAuth consent"
        verbose_name_plural = "OAuth consents"
        ordering = ("-updated_at",)
        constraints = [
            models.UniqueConstraint(fields=("user", "application", "server"), name="mcp_oauth_consent_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} → {self.application} on {self.server.server_id}"

    def issue_token(self, digest: str, prefix: str, expires_at: Any) -> AgentToken:
        """Mirror a DOT access token (by its digest) as an agent token bound to this consent's server and grant."""
        token = AgentToken.objects.create(
            agent=self.agent,
            name=f"OAuth: {self.application}"[:200],
            prefix=prefix,
            digest=digest,
            expires_at=expires_at,
            limit_to_grant=self.limit_to_grant,
            read_only=self.read_only,
            oauth_consent=self,
        )
        token.servers.set([self.server])
        if self.limit_to_grant:
            for relation in GRANT_RELATIONS:
                getattr(token, relation).set(getattr(self, relation).all())
        return token

    def revoke_tokens(self) -> None:
        """Revoke the mirrored tokens and delete DOT's access and refresh tokens for this consent's server."""
        from oauth2_provider.models import get_access_token_model, get_refresh_token_model

        AgentToken.objects.get_queryset().filter(oauth_consent=self).revoke()
        suffix = f"/mcp/{self.server.server_id}"

        def bound_here(row: Any) -> bool:
            return any(str(uri).endswith(suffix) for uri in (row.resource or ()))

        mine = {"user": self.user, "application": self.application}
        for refresh in get_refresh_token_model().objects.filter(revoked__isnull=True, **mine):
            if bound_here(refresh):
                refresh.revoke()  # deletes its access token too
        for access in get_access_token_model().objects.filter(**mine):
            if bound_here(access):
                access.revoke()

    def withdraw(self) -> None:
        """Forget this consent: its tokens stop working on every process within the invalidation bound."""
        with transaction.atomic():
            self.revoke_tokens()
            self.delete()


def revoke_mirror(digest: str) -> None:
    """The DOT access token with this digest is gone: its mirror stops working everywhere."""
    AgentToken.objects.get_queryset().filter(digest=digest, oauth_consent__isnull=False).revoke()
