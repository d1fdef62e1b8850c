"""Tenants (organisations) and the human users who administer them."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Tenant(models.Model):
    """An organisation that owns MCP servers, a tool catalog and agents. Nothing is shared across tenants."""

    slug = models.SlugField("slug", max_length=63, unique=True, help_text="Stable identifier used in URLs and APIs.")
    name = models.CharField("name", max_length=200)
    is_active = models.BooleanField(
        "active", default=True, help_text="An inactive tenant's servers answer 404 and its tokens stop working."
    )
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        verbose_name = "tenant"
        verbose_name_plural = "tenants"
        ordering = ("slug",)

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"


class TenantMembership(models.Model):
    """A human user's role in a tenant; the admin scopes what staff see by it."""

    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        VIEWER = "viewer", "Viewer"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships", verbose_name="tenant")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_memberships", verbose_name="user"
    )
    role = models.CharField("role", max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        verbose_name = "tenant membership"
        verbose_name_plural = "tenant memberships"
        constraints = [models.UniqueConstraint(fields=("tenant", "user"), name="mcp_membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} — {self.get_role_display()} of {self.tenant.slug}"
