"""What a server serves, as versions: ``CatalogVersion`` (an immutable, content-addressed snapshot of the wire
definitions a server exposes; the server serves the one it points to) and ``CatalogChange`` (a change an upstream
made to an entry that its ``on_change`` policy holds for approval, per server it is bound to). Publishing,
rollback, diffs and the hold rules are ``mcp_app.catalog.versions``'s; design: docs/catalog-versions.md.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .servers import McpServer
from .tenancy import Tenant, TenantScoped
from .upstreams import Upstream

#: The lists of a catalog, as a version's entries name them (the MCP list methods' result keys).
LISTS = ("tools", "resources", "resourceTemplates", "prompts")
#: The wire field that names an entry of each list (its key in diffs and held changes).
KEY_FIELDS = {"tools": "name", "resources": "uri", "resourceTemplates": "uriTemplate", "prompts": "name"}


class CatalogVersion(TenantScoped):
    """One snapshot of what a server exposes: ``entries`` in list order, each ``{"list", "ref", "upstream",
    "definition"}`` where ``definition`` is the entry's full wire object (name, title, description, schemas,
    annotations, icons, ``_meta``) and ``ref`` the catalog row it was taken from. ``digest`` is the sha256 of the
    canonical JSON of the lists and definitions only (not the refs): two versions with the same digest serve the
    same thing. Never updated once written."""

    same_tenant = ("tenant", "server")

    class Source(models.TextChoices):
        EDIT = "edit", "Published on edit"
        PUBLISH = "publish", "Published by hand"
        ROLLBACK = "rollback", "Rollback"
        UPSTREAM = "upstream", "Upstream change published"
        INITIAL = "initial", "First version"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="catalog_versions", verbose_name="tenant")
    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="catalog_versions", verbose_name="server"
    )
    number = models.PositiveIntegerField("version", help_text="1, 2, 3… per server, in the order published.")
    digest = models.CharField("digest", max_length=64, help_text="sha256 of the canonical JSON of the definitions.")
    entries = models.JSONField("entries", default=list)
    source = models.CharField("source", max_length=16, choices=Source.choices, default=Source.PUBLISH)
    rolled_back_to = models.PositiveIntegerField(
        "republishes version", null=True, blank=True, help_text="For a rollback: the version it republished."
    )
    note = models.CharField("note", max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="published by",
    )
    created_at = models.DateTimeField("published", auto_now_add=True)

    class Meta:
        verbose_name = "catalog version"
        verbose_name_plural = "catalog versions"
        ordering = ("server", "-number")
        constraints = [
            models.UniqueConstraint(fields=("server", "number"), name="mcp_catalog_version_unique_number"),
        ]

    def __str__(self) -> str:
        return f"{self.server.server_id} v{self.number}"

    @property
    def short_digest(self) -> str:
        return self.digest[:12]


class CatalogChangeQuerySet(models.QuerySet["CatalogChange"]):
    def pending(self) -> CatalogChangeQuerySet:
        return self.filter(status=CatalogChange.Status.PENDING)


class CatalogChange(TenantScoped):
    """A change an upstream's sync found in one of its entries, held for approval on one server the upstream is
    bound to (one row per server): ``old`` is the definition the server publishes (``None``: an added entry),
    ``new`` what the upstream now says (``None``: a removed entry). Pending until a version of the server that
    includes it is published (``published``), or the upstream goes back to the published definition
    (``reverted``), or a later change of the same entry replaces it (``superseded``)."""

    same_tenant = ("tenant", "server", "upstream")

    class Status(models.TextChoices):
        PENDING = "pending", "Pending approval"
        PUBLISHED = "published", "Published"
        REVERTED = "reverted", "Reverted upstream"
        SUPERSEDED = "superseded", "Superseded"

    class Change(models.TextChoices):
        ADDED = "added", "Added"
        CHANGED = "changed", "Changed"
        REMOVED = "removed", "Removed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="catalog_changes", verbose_name="tenant")
    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="catalog_changes", verbose_name="server"
    )
    upstream = models.ForeignKey(
        Upstream, on_delete=models.CASCADE, related_name="catalog_changes", verbose_name="upstream"
    )
    list_name = models.CharField("list", max_length=24, choices=[(name, name) for name in LISTS])
    key = models.CharField("name or URI", max_length=2000, help_text="As the server exposes it.")
    ref = models.BigIntegerField(
        "entry", null=True, blank=True, help_text="The catalog row (its primary key); empty once removed."
    )
    change = models.CharField("change", max_length=16, choices=Change.choices)
    old = models.JSONField("published definition", null=True, blank=True)
    new = models.JSONField("upstream's definition", null=True, blank=True)
    status = models.CharField("status", max_length=16, choices=Status.choices, default=Status.PENDING)
    first_seen_at = models.DateTimeField("first seen", auto_now_add=True)
    seen_at = models.DateTimeField("last seen", auto_now=True)
    resolved_at = models.DateTimeField("resolved", null=True, blank=True)
    resolved_in = models.ForeignKey(
        CatalogVersion,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="approved_changes",
        verbose_name="published in",
    )

    objects = CatalogChangeQuerySet.as_manager()

    class Meta:
        verbose_name = "held upstream change"
        verbose_name_plural = "held upstream changes"
        ordering = ("-seen_at",)
        indexes = [models.Index(fields=("server", "status"), name="mcp_catalog_change_pending")]

    def __str__(self) -> str:
        return f"{self.change} {self.list_name} entry {self.key!r}"
