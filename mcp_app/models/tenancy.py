"""Tenants (organisations) and the human users who administer them."""

from __future__ import annotations

import zoneinfo
from typing import Any, ClassVar, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db import models

from ..definitions.registry import registry
from .limits import rate_burst_field, rate_limit_field

#: In ``Tenant.allowed_python_tools``: every registered tool.
ALL_PYTHON_TOOLS = "*"


def python_tool_allowed(allowed: Any, python_name: str) -> bool:
    """Whether an allow-list (``Tenant.allowed_python_tools``) admits the registered tool ``python_name``."""
    return isinstance(allowed, list) and (ALL_PYTHON_TOOLS in allowed or python_name in allowed)


def validate_time_zone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"{value!r} is not a known IANA time zone.") from None


class Tenant(models.Model):
    """An organisation that owns MCP servers, a tool catalog and agents. Nothing is shared across tenants."""

    slug = models.SlugField("slug", max_length=63, unique=True, help_text="Stable identifier used in URLs and APIs.")
    name = models.CharField("name", max_length=200)
    is_active = models.BooleanField(
        "active", default=True, help_text="An inactive tenant's servers answer 404 and its tokens stop working."
    )
    allowed_python_tools = models.JSONField(
        "allowed Python tools",
        default=list,
        blank=True,
        help_text='Code-registered (@tool) tools this tenant may bind, by registered name; ["*"] allows all. '
        "Set by the operator (superusers) only.",
    )
    max_worker_calls = models.PositiveIntegerField(
        "concurrent worker calls",
        null=True,
        blank=True,
        help_text="At most this many worker calls of this tenant run at once; empty: the WORKER_CALLS_PER_TENANT "
        "setting. Set by the operator (superusers) only.",
    )
    rate_limit = rate_limit_field("tenant")
    rate_burst = rate_burst_field("tenant")
    oauth_dynamic_clients = models.BooleanField(
        "OAuth dynamic clients",
        default=True,
        help_text="OAuth clients that registered themselves (RFC 7591 dynamic registration) may be authorized for "
        "this tenant's servers. Off: only pre-registered clients and client ID metadata documents.",
    )
    time_zone = models.CharField(
        "time zone",
        max_length=64,
        default="UTC",
        validators=[validate_time_zone],
        help_text="The IANA time zone whose days and months the usage ledger and budgets count in, e.g. Europe/Paris.",
    )
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        verbose_name = "tenant"
        verbose_name_plural = "tenants"
        ordering = ("slug",)

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"

    def allows_python_tool(self, python_name: str) -> bool:
        """Whether the operator lets this tenant use the registered tool ``python_name``."""
        return python_tool_allowed(self.allowed_python_tools, python_name)

    def allow_python_tools(self, names: Any) -> None:
        """Add registered tool names to the allow-list (an operator's verb: setup code, commands)."""
        current = list(self.allowed_python_tools or [])
        merged = list(dict.fromkeys([*current, *names]))
        if merged != current:
            self.allowed_python_tools = merged
            self.save(update_fields=["allowed_python_tools"])

    def clean(self) -> None:
        super().clean()
        value = self.allowed_python_tools
        if not isinstance(value, list) or not all(isinstance(name, str) and name for name in value):
            raise ValidationError({"allowed_python_tools": 'A list of registered tool names, e.g. ["echo"], or ["*"].'})
        unknown = [name for name in value if name != ALL_PYTHON_TOOLS and registry.get(name) is None]
        if unknown:
            known = ", ".join(registry.names())
            raise ValidationError(
                {"allowed_python_tools": f"Not registered in code: {', '.join(unknown)}. Known: {known}."}
            )


class TenantScoped(models.Model):
    """A row whose related rows belong to one tenant: ``same_tenant`` names them, the anchor first (``tenant``, or
    e.g. a binding's server). ``clean()`` reports a row of another tenant on its field and ``save()`` refuses it
    (``ValueError``), so no path writes one."""

    same_tenant: ClassVar[tuple[str, ...]] = ()

    class Meta:
        abstract = True

    def _tenant_of(self, name: str) -> int | None:
        if name == "tenant":
            tenant_id: int | None = getattr(self, f"{name}_id")
            return tenant_id
        try:  # the object, not its id: an admin form checks a binding before it saves a new upstream
            related = getattr(self, name)
        except ObjectDoesNotExist:
            return None  # not chosen: that field's own error says so
        return None if related is None else cast("int | None", related.tenant_id)

    def foreign_rows(self) -> dict[str, str]:
        """``{field: why}`` for each related row of another tenant than the anchor's (empty: none)."""
        anchor, *others = self.same_tenant
        tenant_id = self._tenant_of(anchor)
        owner = self._meta.verbose_name if anchor == "tenant" else anchor
        return {
            name: f"The {owner} and the {name} belong to different tenants."
            for name in others
            if tenant_id is not None and self._tenant_of(name) not in (None, tenant_id)
        }

    def clean(self) -> None:
        super().clean()
        if foreign := self.foreign_rows():
            raise ValidationError(foreign)

    def save(self, *args: Any, **kwargs: Any) -> None:
        if foreign := self.foreign_rows():
            raise ValueError(" ".join(foreign.values()))
        super().save(*args, **kwargs)


class TenantMembershipManager(models.Manager["TenantMembership"]):
    def owners_left(self, tenant_id: int, *, without: list[int] | tuple[int, ...] = ()) -> int:
        """How many owners the tenant keeps if the memberships ``without`` stop being owners."""
        return self.filter(tenant_id=tenant_id, role=TenantMembership.Role.OWNER).exclude(pk__in=list(without)).count()


class TenantMembership(models.Model):
    """A human user's role in a tenant, by which the admin and the API scope what staff see. A tenant keeps its
    last owner: not demoted (``clean``) nor removed in the admin."""

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

    objects = TenantMembershipManager()

    class Meta:
        verbose_name = "tenant membership"
        verbose_name_plural = "tenant memberships"
        constraints = [models.UniqueConstraint(fields=("tenant", "user"), name="mcp_membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} — {self.get_role_display()} of {self.tenant.slug}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; a new member becomes staff, since Django's admin opens only for staff and the role alone decides
        what they see there (``mcp_app.permissions``). Removing a membership leaves staff status as it is."""
        adding = self._state.adding
        super().save(*args, **kwargs)
        users = get_user_model()
        if adding and any(field.name == "is_staff" for field in users._meta.get_fields()):  # else left as it is
            users._default_manager.filter(pk=self.user_id, is_staff=False).update(is_staff=True)
            if type(self).user.is_cached(self):
                self.user.is_staff = True

    def clean(self) -> None:
        super().clean()
        if self.pk is None or self.role == self.Role.OWNER:
            return
        was_owner = type(self).objects.filter(pk=self.pk, role=self.Role.OWNER).exists()
        if was_owner and not type(self).objects.owners_left(self.tenant_id, without=[self.pk]):
            raise ValidationError({"role": "A tenant keeps at least one owner: make someone else owner first."})
