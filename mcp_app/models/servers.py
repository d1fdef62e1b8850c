"""Hosted MCP servers: named endpoints exposing a chosen subset of their tenant's catalog."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F

from ..invalidation import publish
from ..protocol.versions import ALL_VERSIONS
from .tenancy import Tenant

# Who tells the live streams of a server that its catalog changed: ``(server ids, kinds, updated uri)``. The
# catalog layer registers itself (``mcp_app.catalog.signals``, imported when the app is ready); the models hold
# state and never touch the channel layer.
CatalogAnnouncer = Callable[[Iterable[int], tuple[str, ...], str | None], None]
_announcers: list[CatalogAnnouncer] = []


def on_catalog_change(announcer: CatalogAnnouncer) -> CatalogAnnouncer:
    """Call ``announcer`` whenever ``bump_catalog_version`` marks catalogs changed; usable as a decorator."""
    _announcers.append(announcer)
    return announcer


def _default_versions() -> list[str]:
    return list(ALL_VERSIONS)


def _validate_versions(value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("Choose at least one protocol version.")
    unknown = [version for version in value if version not in ALL_VERSIONS]
    if unknown:
        raise ValidationError(
            f"Unknown protocol version(s): {', '.join(map(str, unknown))}. Known: {', '.join(ALL_VERSIONS)}."
        )


def _validate_origins(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValidationError('Allowed origins must be a list of origin strings, e.g. ["https://app.example"].')
    for origin in value:
        if origin != origin.strip() or origin.endswith("/") or "://" not in origin:
            raise ValidationError(f"{origin!r} is not an origin (scheme://host[:port], no path).")


class McpServerManager(models.Manager["McpServer"]):
    def servable(self) -> models.QuerySet[McpServer]:
        """Servers that answer requests: enabled, of an active tenant."""
        return self.filter(enabled=True, tenant__is_active=True)

    def bump_catalog_version(
        self,
        server_ids: list[int] | set[int],
        kinds: tuple[str, ...] = ("tools",),
        updated_uri: str | None = None,
        *,
        announce: bool = True,
    ) -> None:
        """Mark these servers' catalogs changed: every process re-resolves them, and the announcers
        (``on_catalog_change``: the catalog layer publishes the edit, which tells live streams which lists changed)
        hear which ``kinds`` of entry were edited, or which resource was updated. ``announce=False``: re-resolve
        only (a publication, which announces itself)."""
        if not server_ids:
            return
        self.filter(pk__in=list(server_ids)).update(catalog_version=F("catalog_version") + 1)
        publish(*(f"server:{pk}" for pk in server_ids))
        if announce:
            for announcer in tuple(_announcers):
                announcer(server_ids, kinds, updated_uri)


class McpServer(models.Model):
    """One MCP endpoint, ``/mcp/<server_id>``, belonging to a tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="servers", verbose_name="tenant")
    server_id = models.SlugField(
        "server id", max_length=63, unique=True, help_text="Public identifier in the endpoint URL /mcp/<server id>."
    )
    name = models.CharField("name", max_length=200)
    title = models.CharField("title", max_length=200, blank=True, help_text="Human-readable display name.")
    version = models.CharField("version", max_length=50, default="1.0.0")
    instructions = models.TextField(
        "instructions", blank=True, help_text="Sent to clients in the initialize result, to guide the model."
    )
    enabled = models.BooleanField("enabled", default=True, help_text="A disabled server answers 404.")
    allowed_origins = models.JSONField(
        "allowed origins",
        default=list,
        blank=True,
        validators=[_validate_origins],
        help_text="Browser origins allowed to call this server. Requests with any other Origin get 403.",
    )
    protocol_versions = models.JSONField(
        "protocol versions",
        default=_default_versions,
        validators=[_validate_versions],
        help_text="Revisions this server speaks: any of " + ", ".join(ALL_VERSIONS) + ". "
        "Without 2026-07-28 it refuses stateless requests; with only 2026-07-28 it refuses the handshake era.",
    )
    sessions_required = models.BooleanField(
        "sessions required",
        default=False,
        help_text="Handshake era: refuse requests without an Mcp-Session-Id (400). Off: such requests are served "
        "statelessly.",
    )
    oauth_enabled = models.BooleanField(
        "OAuth",
        default=True,
        help_text="Accept OAuth 2.1 access tokens issued for this server and advertise them (RFC 9728). Off: only "
        "agent tokens with ?agentId= work, as before OAuth.",
    )
    oauth_open_consent = models.BooleanField(
        "anyone may consent",
        default=False,
        help_text="Let every signed-in user of the site authorize OAuth clients for this server. Off: only active "
        "members of the server's tenant.",
    )
    review_edits = models.BooleanField(
        "edits wait for publication",
        default=False,
        help_text="Off: an edit of what this server exposes is published at once (a new catalog version). On: edits "
        "collect in the draft until someone publishes it (docs/catalog-versions.md).",
    )
    published_version = models.ForeignKey(
        "mcp_app.CatalogVersion",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
        verbose_name="published version",
        help_text="The catalog version this server serves; empty: none published yet (it serves its draft).",
    )
    catalog_version = models.PositiveBigIntegerField(
        "catalog version", default=1, editable=False, help_text="Bumped on every catalog edit; caches key on it."
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = McpServerManager()

    class Meta:
        verbose_name = "MCP server"
        verbose_name_plural = "MCP servers"
        ordering = ("server_id",)
        indexes = [models.Index(fields=("tenant", "enabled"), name="mcp_server_tenant_enabled")]

    def __str__(self) -> str:
        return f"{self.server_id} ({self.tenant.slug})"

    @property
    def supported_versions(self) -> tuple[str, ...]:
        return tuple(version for version in ALL_VERSIONS if version in (self.protocol_versions or ()))

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The catalog version is only ever bumped, and a version published, atomically in the database; a form
        # save of a stale instance must not write an old value back.
        if not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                field.name
                for field in self._meta.concrete_fields
                if not field.primary_key and field.name not in ("catalog_version", "published_version")
            ]
        super().save(*args, **kwargs)
