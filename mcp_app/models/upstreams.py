"""Upstream MCP servers federated into a tenant's catalog: ``Upstream`` (its URL, SSRF-checked on every save and
connection, and its outbound credentials, the secrets write-only) and ``UpstreamBinding`` (exposed whole on one
server). Not owned here: the sync (``mcp_app.federation.sync``; docs/upstreams.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Coalesce
from django.dispatch import Signal
from django.utils import timezone

from ..definitions.http_tools import display_url, validate_timeout
from ..definitions.upstreams import (
    ERA_AUTO,
    ERA_HANDSHAKE,
    ERA_MODERN,
    validate_prefix,
    validate_upstream_name,
    validate_upstream_url,
)
from .secrets import SecretHeaders, SecretsQuerySet, WriteOnlySecret
from .servers import McpServer
from .tenancy import Tenant, TenantScoped


def _valid_name(value: str) -> None:
    try:
        validate_upstream_name(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def _valid_prefix(value: str) -> None:
    try:
        validate_prefix(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


class UpstreamQuerySet(SecretsQuerySet["Upstream"]):
    def with_entry_counts(self) -> UpstreamQuerySet:
        """Annotated with ``tool_count``, ``resource_count`` and ``prompt_count`` (one subquery each)."""

        def count(related_name: str) -> Any:
            # The entries' models through the reverse relations (``models.catalog`` imports this module).
            model: Any = self.model._meta.get_field(related_name).related_model
            rows = model._default_manager.filter(upstream=models.OuterRef("pk")).order_by().values("upstream")
            return Coalesce(models.Subquery(rows.annotate(n=models.Count("pk")).values("n")[:1]), 0)

        return self.annotate(
            tool_count=count("tools"), resource_count=count("resources"), prompt_count=count("prompts")
        )

    def due_for_sync(self, default_interval: float) -> list[Upstream]:
        """Enabled upstreams of active tenants whose last sync is older than their interval (or never ran)."""
        now = timezone.now()
        return [
            upstream
            for upstream in self.filter(enabled=True, tenant__is_active=True).select_related("tenant")
            if (interval := upstream.sync_interval_seconds or default_interval) > 0
            and (upstream.last_synced_at is None or (now - upstream.last_synced_at).total_seconds() >= interval)
        ]


class Upstream(SecretHeaders):
    """An existing MCP server whose tools, resources and prompts a tenant brings into its catalog."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="upstreams", verbose_name="tenant")
    name = models.CharField(
        "name",
        max_length=64,
        validators=[_valid_name],
        help_text="Lowercase letters, digits, '-' and '_'; unique within the tenant (mcp_upstream --name).",
    )
    url = models.CharField(
        "URL",
        max_length=2000,
        help_text="The upstream's Streamable HTTP endpoint, e.g. https://mcp.example.com/mcp. Private, loopback "
        "and metadata addresses are refused unless the operator allow-lists them (OUTBOUND_ALLOWED_NETWORKS).",
    )
    prefix = models.CharField(
        "prefix",
        max_length=64,
        blank=True,
        validators=[_valid_prefix],
        help_text="Put before the names it contributes: with 'gh_', its tool 'search' is listed as 'gh_search'.",
    )
    headers = models.JSONField(
        "headers", default=dict, blank=True, help_text='Plain request headers, e.g. {"X-Team": "billing"}.'
    )
    oauth_client_id = models.CharField(
        "OAuth client ID",
        max_length=255,
        blank=True,
        help_text="Client credentials grant against the upstream's authorization server (discovered from the "
        "upstream, RFC 9728); empty: no OAuth.",
    )
    oauth_client_secret_encrypted = models.TextField("OAuth client secret (encrypted)", blank=True, editable=False)
    oauth_issuer = models.CharField(
        "OAuth issuer", max_length=2000, blank=True, help_text="The authorization server the credentials belong to."
    )
    oauth_scope = models.CharField("OAuth scope", max_length=500, blank=True)
    timeout_seconds = models.FloatField(
        "timeout (seconds)",
        null=True,
        blank=True,
        help_text="How long a call may take; empty: the operator's default (UPSTREAM_DEFAULT_TIMEOUT_SECONDS).",
    )
    era = models.CharField(
        "protocol era",
        max_length=16,
        choices=[
            (ERA_AUTO, "auto: 2026-07-28 where offered, else the handshake"),
            (ERA_HANDSHAKE, "2025-11-25: the initialize handshake"),
            (ERA_MODERN, "2026-07-28"),
        ],
        default=ERA_AUTO,
        help_text="Which protocol era mcp-host speaks to it. Pin 2025-11-25 for an upstream whose tools elicit or "
        "sample the handshake way (ctx.elicit): over 2026-07-28 they would have no back-channel.",
    )
    sync_interval_seconds = models.PositiveIntegerField(
        "sync interval (seconds)",
        null=True,
        blank=True,
        help_text="How often the catalog is re-read; empty: the operator's default (UPSTREAM_SYNC_INTERVAL_SECONDS).",
    )

    class OnChange(models.TextChoices):
        PUBLISH = "publish", "Publish changes at once"
        HOLD = "hold", "Hold changes for approval (serve the approved definitions)"
        BLOCK = "block", "Hold changes and stop serving the changed entries until approved"

    on_change = models.CharField(
        "on change",
        max_length=8,
        choices=OnChange.choices,
        default=OnChange.HOLD,
        help_text="What a sync does when the upstream adds, removes or changes an entry after its first sync "
        "(docs/catalog-versions.md). Held changes wait in the draft of each server the upstream is bound to.",
    )
    enabled = models.BooleanField(
        "enabled",
        default=True,
        help_text="Disabled: its entries leave every server's catalog until it is enabled again.",
    )
    protocol_version = models.CharField("protocol version", max_length=32, blank=True, editable=False)
    server_info = models.JSONField("server info", null=True, blank=True, editable=False)
    capabilities = models.JSONField("capabilities", null=True, blank=True, editable=False)
    last_synced_at = models.DateTimeField("last synced", null=True, blank=True, editable=False)
    last_sync_error = models.TextField("last sync error", blank=True, editable=False)
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = UpstreamQuerySet.as_manager()

    oauth_client_secret = WriteOnlySecret("oauth_client_secret_encrypted")
    encrypted_columns: ClassVar[tuple[str, ...]] = ("secret_headers_encrypted", "oauth_client_secret_encrypted")

    class Meta:
        verbose_name = "upstream"
        verbose_name_plural = "upstreams"
        ordering = ("tenant", "name")
        constraints = [models.UniqueConstraint(fields=("tenant", "name"), name="mcp_upstream_unique_name")]

    def __str__(self) -> str:
        return f"{self.name} ({display_url(self.url)})"

    def __repr__(self) -> str:
        return f"<Upstream {self.pk}: {self.name}>"

    def reveal_oauth_client_secret(self) -> str:
        """The OAuth client secret in clear, for the token request. Never display or log the result."""
        return Upstream.oauth_client_secret.reveal(self)

    def config_checks(self) -> dict[str, Callable[[], object]]:
        return {
            "name": lambda: validate_upstream_name(self.name),
            "url": lambda: validate_upstream_url(self.url),
            "prefix": lambda: validate_prefix(self.prefix),
            **super().config_checks(),
            "timeout_seconds": lambda: validate_timeout(self.timeout_seconds, "upstream"),
        }

    def config_errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if self.oauth_client_id and not self.oauth_client_secret_encrypted:
            errors["oauth_client_id"] = "Give the client secret too."
        if self.oauth_client_id and not self.oauth_issuer:
            errors["oauth_issuer"] = "Name the authorization server the credentials belong to (its issuer URL)."
        elif self.oauth_issuer:
            try:
                validate_upstream_url(self.oauth_issuer)
            except ValueError as exc:
                errors["oauth_issuer"] = str(exc)
        if self.oauth_client_id and "authorization" in {name.lower() for name in self.secret_header_names}:
            errors["oauth_client_id"] = "Use OAuth or an Authorization secret header, not both."
        return errors


class UpstreamBinding(TenantScoped):
    """An upstream exposed on one server as a whole: every entry it has, including those later syncs add."""

    same_tenant = ("upstream", "server")

    upstream = models.ForeignKey(Upstream, on_delete=models.CASCADE, related_name="bindings", verbose_name="upstream")
    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="upstream_bindings", verbose_name="server"
    )
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        verbose_name = "upstream binding"
        verbose_name_plural = "upstream bindings"
        ordering = ("upstream", "server")
        constraints = [models.UniqueConstraint(fields=("upstream", "server"), name="mcp_upstream_binding_unique")]

    def __str__(self) -> str:
        return f"{self.upstream.name} on {self.server.server_id}"


#: Sent by every sync (``federation.sync.apply``) inside its transaction, after it wrote the upstream's entries,
#: with ``upstream`` (its locked row as it was before: ``last_synced_at`` is ``None`` on its first sync) and
#: ``servers`` (the primary keys of the servers that exposed or expose it). ``catalog.drift`` publishes or holds
#: what changed. A receiver that raises fails the sync, which keeps the catalog as it was.
upstream_synced = Signal()
