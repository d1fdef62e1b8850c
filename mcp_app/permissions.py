"""Who may do what with tenant-owned objects: the one place the admin and the REST API ask (the rules as users
meet them: docs/api.md, "Who sees and does what").

A user's rights over a tenant come from their ``TenantMembership`` role: ``viewer`` reads, ``admin`` also adds,
changes and deletes, ``owner`` also manages memberships and edits the tenant; superusers do everything, and alone
create or delete tenants and edit their operator-only fields. The role grants the model permissions it needs
(``has_model_permission``); permissions given the Django way add pages, never tenants.

- ``TENANT_PATHS`` / ``register_tenant_path``: how each tenant-owned model reaches its tenant; an unlisted model is
  refused (``LookupError``), never shown unscoped.
- ``scope_queryset(user, queryset)``, ``can_view``, ``can_change``, ``can_delete``, ``can_add``: what a user sees
  and may do.
- ``access_for(user)``: a ``TenantAccess``, cached on the user object: at most one membership query per request.
- ``OPERATOR_ROWS`` / ``register_operator_rows``: rows of a tenant-owned model that only superusers add, change or
  delete (an operator's budget): members see them, no tenant role writes them.

Not owned here: what a form shows (``mcp_app.admin``), what the wire allows an agent (tokens, grants).
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import models
from django.db.models import QuerySet

from .models import Tenant, TenantMembership

VIEWER = TenantMembership.Role.VIEWER.value
ADMIN = TenantMembership.Role.ADMIN.value
OWNER = TenantMembership.Role.OWNER.value

#: Roles ordered by what they allow; a role allows everything the roles below it allow.
ROLE_RANK: dict[str, int] = {VIEWER: 1, ADMIN: 2, OWNER: 3}

#: Model label (``app_label.model_name``) → lookup path from the model to the tenant's primary key.
TENANT_PATHS: dict[str, str] = {
    "mcp_app.tenant": "pk",
    "mcp_app.tenantmembership": "tenant",
    "mcp_app.mcpserver": "tenant",
    "mcp_app.agent": "tenant",
    "mcp_app.agenttoken": "agent__tenant",
    "mcp_app.tool": "tenant",
    "mcp_app.resource": "tenant",
    "mcp_app.prompt": "tenant",
    "mcp_app.servertool": "server__tenant",
    "mcp_app.serverresource": "server__tenant",
    "mcp_app.serverprompt": "server__tenant",
    "mcp_app.mcpsession": "server__tenant",
    "mcp_app.tooltask": "server__tenant",
    "mcp_app.webhook": "tool__tenant",
    "mcp_app.toolcall": "tenant",
    "mcp_app.oauthconsent": "server__tenant",
    "mcp_app.oauthagent": "tenant",
    "mcp_app.upstream": "tenant",
    "mcp_app.upstreambinding": "upstream__tenant",
    "mcp_app.usageday": "tenant",
    "mcp_app.budget": "tenant",
    "mcp_app.budgetalert": "tenant",
    "mcp_app.budgetalerthook": "tenant",
    "mcp_app.approval": "tenant",
    "mcp_app.catalogversion": "tenant",
    "mcp_app.catalogchange": "tenant",
}

#: The least role needed for each action, per model label; models not listed use ``DEFAULT_ROLES``.
#: ``None``: no tenant role suffices (superusers only).
DEFAULT_ROLES: dict[str, str | None] = {"view": VIEWER, "add": ADMIN, "change": ADMIN, "delete": ADMIN}
ROLES: dict[str, dict[str, str | None]] = {
    "mcp_app.tenant": {"view": VIEWER, "add": None, "change": OWNER, "delete": None},
    "mcp_app.tenantmembership": {"view": VIEWER, "add": OWNER, "change": OWNER, "delete": OWNER},
    # Made by people consenting (mcp_app.oauth); tenant admins read and withdraw them, nobody edits them.
    "mcp_app.oauthconsent": {"view": VIEWER, "add": None, "change": ADMIN, "delete": ADMIN},
    "mcp_app.oauthagent": {"view": VIEWER, "add": None, "change": None, "delete": None},
    # Recorded by the budgets when a threshold is crossed (docs/budgets.md); read by members, written by nobody.
    "mcp_app.budgetalert": {"view": VIEWER, "add": None, "change": None, "delete": None},
    # The usage ledger is written by its flusher only (mcp_app.limits.ledger): read-only for everyone.
    "mcp_app.usageday": {"view": VIEWER, "add": None, "change": None, "delete": None},
    # Requested by parked calls (mcp_app.runtime.approvals); tenant admins decide them (a change), nobody adds,
    # edits or deletes one by hand (docs/approvals.md).
    "mcp_app.approval": {"view": VIEWER, "add": None, "change": ADMIN, "delete": None},
    # Catalog versions and held upstream changes are written by the versions' verbs (mcp_app.catalog.versions),
    # which need the role that changes the server; as rows, read-only for everyone.
    "mcp_app.catalogversion": {"view": VIEWER, "add": None, "change": None, "delete": None},
    "mcp_app.catalogchange": {"view": VIEWER, "add": None, "change": None, "delete": None},
}

#: Model label → the field values that mark a row only superusers may add, change or delete. A budget the operator
#: set holds whatever the tenant's admins set beside it, so they may read it but never raise or remove it.
OPERATOR_ROWS: dict[str, dict[str, Any]] = {"mcp_app.budget": {"set_by": "operator"}}

ACTIONS = ("view", "add", "change", "delete")


def _label(model: type[models.Model] | models.Model) -> str:
    return model._meta.label_lower


def register_tenant_path(model: type[models.Model], path: str, roles: dict[str, str | None] | None = None) -> None:
    """Declare how ``model`` reaches its tenant (e.g. ``ToolCall`` → ``"tenant"``), and optionally the least role
    per action. Call it at import time of the module that defines or administers the model."""
    TENANT_PATHS[_label(model)] = path
    if roles is not None:
        unknown = set(roles) - set(ACTIONS)
        if unknown:
            raise ValueError(f"unknown actions {sorted(unknown)}; use {ACTIONS}")
        ROLES[_label(model)] = {**DEFAULT_ROLES, **roles}


def register_operator_rows(model: type[models.Model], **values: Any) -> None:
    """Declare that rows of ``model`` with these field values are the operator's: only superusers write them."""
    OPERATOR_ROWS[_label(model)] = values


def is_operator_row(obj: models.Model) -> bool:
    """Whether ``obj`` is a row only superusers may write (``OPERATOR_ROWS``)."""
    values = OPERATOR_ROWS.get(_label(obj))
    return values is not None and all(getattr(obj, name) == value for name, value in values.items())


def tenant_path(model: type[models.Model] | models.Model) -> str:
    """The lookup path from ``model`` to its tenant's primary key; ``LookupError`` for an unmapped model."""
    try:
        return TENANT_PATHS[_label(model)]
    except KeyError:
        raise LookupError(f"{_label(model)} has no tenant path; add it with register_tenant_path") from None


def required_role(model: type[models.Model] | models.Model, action: str) -> str | None:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; use {ACTIONS}")
    return ROLES.get(_label(model), DEFAULT_ROLES)[action]


def tenant_id_of(obj: models.Model) -> int | None:
    """The primary key of the tenant ``obj`` belongs to, following its tenant path (``None`` when unset)."""
    path = tenant_path(obj)
    if path == "pk":
        return obj.pk
    current: Any = obj
    *steps, last = path.split("__")
    for step in steps:
        if getattr(current, f"{step}_id", None) is None:
            return None
        current = getattr(current, step)
    return getattr(current, f"{last}_id", None)


class TenantAccess:
    """One user's roles, by tenant primary key, read once. Superusers are not limited by it."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.is_authenticated = bool(getattr(user, "is_authenticated", False))
        self.is_superuser = self.is_authenticated and bool(getattr(user, "is_superuser", False))
        self.is_active = self.is_authenticated and bool(getattr(user, "is_active", False))
        self._roles: dict[int, str] | None = None

    @property
    def roles(self) -> dict[int, str]:
        """Tenant pk → role: one query, on first use."""
        if self._roles is None:
            self._roles = {}
            if self.is_active:
                self._roles = dict(
                    TenantMembership.objects.filter(user_id=self.user.pk).values_list("tenant_id", "role")
                )
        return self._roles

    def role(self, tenant_id: int | None) -> str | None:
        if tenant_id is None:
            return None
        return self.roles.get(tenant_id)

    def has_role(self, tenant_id: int | None, minimum: str | None) -> bool:
        """Whether the user holds at least ``minimum`` in the tenant (``None``: only superusers pass)."""
        if not self.is_active:
            return False
        if self.is_superuser:
            return True
        if minimum is None:
            return False
        role = self.role(tenant_id)
        return role is not None and ROLE_RANK[role] >= ROLE_RANK[minimum]

    def tenant_ids(self, minimum: str = VIEWER) -> frozenset[int]:
        """Primary keys of the tenants where the user holds at least ``minimum`` (memberships only, also for
        superusers: use ``scope_queryset`` to filter, which lets superusers see everything)."""
        rank = ROLE_RANK[minimum]
        return frozenset(tenant_id for tenant_id, role in self.roles.items() if ROLE_RANK[role] >= rank)


def access_for(user: Any) -> TenantAccess:
    """The user's ``TenantAccess``, cached on the user object (one per request in Django and DRF)."""
    access = getattr(user, "_mcp_tenant_access", None)
    if access is None or access.user is not user:
        access = TenantAccess(user)
        # AnonymousUser and other objects that refuse attributes: nothing to cache, nothing is ever read.
        with contextlib.suppress(AttributeError):
            user._mcp_tenant_access = access
    return access


def forget(user: Any) -> None:
    """Drop the cached roles (after the user's memberships changed within the same request)."""
    if hasattr(user, "_mcp_tenant_access"):
        del user._mcp_tenant_access


def has_model_permission(user: Any, action: str, model: type[models.Model] | models.Model) -> bool:
    """Whether ``user`` holds the model permission for ``action``: a tenant role that allows it in some tenant
    (the role is enough), or Django's own permission (``change`` implies ``view``, as in the admin)."""
    if not getattr(user, "is_active", False):
        return False
    if _label(model) in TENANT_PATHS:
        minimum = required_role(model, action)
        if minimum is not None and access_for(user).tenant_ids(minimum):
            return True
    opts = model._meta
    if user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}"):
        return True
    return action == "view" and user.has_perm(f"{opts.app_label}.change_{opts.model_name}")


def in_tenant(queryset: QuerySet[Any], tenant_id: int) -> QuerySet[Any]:
    """``queryset`` limited to the objects of one tenant (no user involved: scope with ``scope_queryset``)."""
    path = tenant_path(queryset.model)
    return queryset.filter(**{"pk" if path == "pk" else path: tenant_id})


def scope_queryset(user: Any, queryset: QuerySet[Any], minimum: str = VIEWER) -> QuerySet[Any]:
    """``queryset`` limited to objects of the tenants where ``user`` holds at least ``minimum``; everything
    for superusers, nothing for anonymous or inactive users. Works for every model in ``TENANT_PATHS``."""
    path = tenant_path(queryset.model)
    access = access_for(user)
    if not access.is_active:
        return queryset.none()
    if access.is_superuser:
        return queryset
    queryset = queryset.filter(**{"pk__in" if path == "pk" else f"{path}__in": list(access.tenant_ids(minimum))})
    operator_rows = OPERATOR_ROWS.get(_label(queryset.model))
    if operator_rows and ROLE_RANK[minimum] > ROLE_RANK[VIEWER]:
        queryset = queryset.exclude(**operator_rows)  # asked for what the user may write: never the operator's
    return queryset


def _allowed(user: Any, action: str, model: type[models.Model] | models.Model, tenant_id: int | None) -> bool:
    if not has_model_permission(user, action, model):
        return False
    access = access_for(user)
    if action != "view" and isinstance(model, models.Model) and is_operator_row(model) and not access.is_superuser:
        return False
    return access.has_role(tenant_id, required_role(model, action))


def can_view(user: Any, obj_or_tenant: models.Model) -> bool:
    """Whether ``user`` may see this object (or, given a tenant, the tenant itself)."""
    return _allowed(user, "view", obj_or_tenant, tenant_id_of(obj_or_tenant))


def can_change(user: Any, obj_or_tenant: models.Model) -> bool:
    """Whether ``user`` may edit this object, in the tenant it belongs to now. When an edit moves an object to
    another tenant, ask again with the edited object (the admin's forms never offer foreign tenants)."""
    return _allowed(user, "change", obj_or_tenant, tenant_id_of(obj_or_tenant))


def can_delete(user: Any, obj_or_tenant: models.Model) -> bool:
    return _allowed(user, "delete", obj_or_tenant, tenant_id_of(obj_or_tenant))


def can_add(user: Any, obj_or_tenant: models.Model, model: type[models.Model] | None = None) -> bool:
    """Whether ``user`` may create this object.

    ``obj_or_tenant`` is the unsaved object (its tenant is read through its tenant path), or the tenant the new
    object goes into with ``model`` saying what it is. An unsaved ``Tenant`` is a new tenant: superusers only.
    """
    if isinstance(obj_or_tenant, Tenant) and obj_or_tenant.pk is not None:
        if model is None:
            # "May this user add something to the tenant at all": the role for catalog objects, no model check.
            return access_for(user).has_role(obj_or_tenant.pk, DEFAULT_ROLES["add"])
        return _allowed(user, "add", model, obj_or_tenant.pk)
    return _allowed(user, "add", model or obj_or_tenant, tenant_id_of(obj_or_tenant))


def can_manage_memberships(user: Any, tenant: Tenant | int) -> bool:
    """Whether ``user`` may add, change and remove the memberships of ``tenant`` (owners and superusers)."""
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    return access_for(user).has_role(tenant_id, required_role(TenantMembership, "change"))


def editable_tenants(user: Any, minimum: str = ADMIN) -> QuerySet[Tenant]:
    """Active tenants where ``user`` may create objects (all tenants for superusers)."""
    return scope_queryset(user, Tenant.objects.all(), minimum)


def default_tenant(user: Any, minimum: str = ADMIN) -> Tenant | None:
    """The tenant a new object of ``user`` goes into without asking: their only editable tenant, else ``None``
    (several tenants: the user picks; superusers always pick)."""
    access = access_for(user)
    if access.is_superuser:
        return None
    tenant_ids = access.tenant_ids(minimum)
    if len(tenant_ids) != 1:
        return None
    return Tenant.objects.filter(pk__in=tenant_ids).first()


STAFF_GROUP_NAME = "MCP tenant staff"


def ensure_staff_group(name: str = STAFF_GROUP_NAME) -> Any:
    """The auth group holding every ``mcp_app`` model permission, created or brought up to date. Tenant members
    do not need it (their role grants what it allows); it is for staff who are given pages the Django way."""
    from django.contrib.auth.models import Group, Permission

    group, _ = Group.objects.get_or_create(name=name)
    group.permissions.add(*Permission.objects.filter(content_type__app_label="mcp_app"))
    return group


__all__ = [
    "ADMIN",
    "OPERATOR_ROWS",
    "OWNER",
    "ROLES",
    "ROLE_RANK",
    "STAFF_GROUP_NAME",
    "TENANT_PATHS",
    "VIEWER",
    "TenantAccess",
    "access_for",
    "can_add",
    "can_change",
    "can_delete",
    "can_manage_memberships",
    "can_view",
    "default_tenant",
    "editable_tenants",
    "ensure_staff_group",
    "forget",
    "has_model_permission",
    "in_tenant",
    "is_operator_row",
    "register_operator_rows",
    "register_tenant_path",
    "required_role",
    "scope_queryset",
    "tenant_id_of",
    "tenant_path",
]
