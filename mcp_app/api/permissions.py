"""DRF glue onto the tenant permission rules (interim: the shared ``mcp_app.permissions`` replaces the policy
section below when the admin's module lands).

Rules (the admin's, exactly): a user sees the objects of the tenants they are a member of; ``owner`` and
``admin`` write, ``viewer`` reads; only owners manage memberships; superusers see and write everything.
Objects of other tenants are outside every queryset, so they are 404, never 403.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import permissions
from rest_framework.request import Request

from ..models import TenantMembership

Role = TenantMembership.Role
READ_ROLES = (Role.OWNER, Role.ADMIN, Role.VIEWER)
WRITE_ROLES = (Role.OWNER, Role.ADMIN)
OWNER_ROLES = (Role.OWNER,)


# ---- policy (interim) ---------------------------------------------------------------------------------------


def tenant_path(model: type[models.Model]) -> str:
    """The ORM path from ``model`` to its tenant ('' for the tenant itself)."""
    from ..models import Tenant

    if model is Tenant:
        return ""
    for path in ("tenant", "server__tenant", "agent__tenant"):
        head = path.split("__")[0]
        try:
            model._meta.get_field(head)
        except Exception:  # noqa: S112 (FieldDoesNotExist: try the next path)
            continue
        return path
    raise LookupError(f"{model.__name__} has no tenant")


def tenant_ids(user: Any, roles: tuple[str, ...] = READ_ROLES) -> set[int] | None:
    """Tenants in which ``user`` holds one of ``roles``; ``None`` means every tenant (a superuser)."""
    if not user or not user.is_authenticated or not user.is_active:
        return set()
    if user.is_superuser:
        return None
    cache = user.__dict__.setdefault("_mcp_tenant_roles", None)
    if cache is None:
        cache = dict(
            TenantMembership.objects.filter(user=user, tenant__is_active=True).values_list("tenant_id", "role")
        )
        user.__dict__["_mcp_tenant_roles"] = cache
    return {tenant_id for tenant_id, role in cache.items() if role in roles}


def scope(queryset: models.QuerySet[Any], user: Any, roles: tuple[str, ...] = READ_ROLES) -> models.QuerySet[Any]:
    """``queryset`` narrowed to the tenants where ``user`` holds one of ``roles``."""
    allowed = tenant_ids(user, roles)
    if allowed is None:
        return queryset
    path = tenant_path(queryset.model)
    return queryset.filter(**{f"{path}__in" if path else "pk__in": allowed})


def object_tenant_id(obj: models.Model) -> int:
    path = tenant_path(type(obj))
    if not path:
        return int(obj.pk)
    target: Any = obj
    for part in path.split("__")[:-1]:
        target = getattr(target, part)
    return int(target.tenant_id)


def write_roles_for(model: type[models.Model]) -> tuple[str, ...]:
    return OWNER_ROLES if model is TenantMembership else WRITE_ROLES


def can_write(user: Any, obj: models.Model) -> bool:
    allowed = tenant_ids(user, write_roles_for(type(obj)))
    return allowed is None or object_tenant_id(obj) in allowed


def can_create_any(user: Any, model: type[models.Model]) -> bool:
    allowed = tenant_ids(user, write_roles_for(model))
    return allowed is None or bool(allowed)


# ---- DRF glue -----------------------------------------------------------------------------------------------

READ_ACTIONS = frozenset({"list", "retrieve", "metadata"})


class TenantRolePermission(permissions.BasePermission):
    """Authenticated users only; writes need a writing role in the object's tenant (owner for memberships).

    A view's ``read_only_actions`` (e.g. nothing) extends what counts as reading; every other action, and every
    unsafe method, is a write. Reading needs no check beyond the scoped queryset.
    """

    message = "Your role in this tenant does not allow this."

    def _is_write(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return False
        return getattr(view, "action", None) not in READ_ACTIONS

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_active):
            return False
        if self._is_write(request, view):
            return can_create_any(user, view.get_queryset().model)
        return True

    def has_object_permission(self, request: Request, view: Any, obj: models.Model) -> bool:
        if not self._is_write(request, view):
            return True
        return can_write(request.user, obj)
