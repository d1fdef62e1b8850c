"""DRF glue onto ``mcp_app.permissions``, the one module the admin and the API ask; no rule is decided here.

Each request maps to one of the four Django actions (view, add, change, delete) and is checked exactly as the
admin checks it: the model permission of the action (which a role that allows it grants), and the user's
``TenantMembership`` role in the object's tenant (``viewer`` views, ``admin`` adds/changes/deletes, ``owner`` also manages memberships;
superusers everything). Querysets are scoped with ``scope_queryset`` before any lookup, so another tenant's
object is a 404, never a 403; a user who may see an object but not change it gets a 403.

Custom actions name their Django action in the view's ``action_permissions`` (``revoke`` and ``terminate`` are
changes); any other unsafe action counts as a change.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import permissions
from rest_framework.request import Request

from ..permissions import (
    access_for,
    can_change,
    can_delete,
    can_view,
    has_model_permission,
    required_role,
)

_STANDARD_ACTIONS = {
    "list": "view",
    "retrieve": "view",
    "metadata": "view",
    "create": "add",
    "update": "change",
    "partial_update": "change",
    "destroy": "delete",
}


def django_action(request: Request, view: Any) -> str:
    """The Django action (view/add/change/delete) this request performs."""
    name = getattr(view, "action", None)
    declared = getattr(view, "action_permissions", {})
    if name in declared:
        return str(declared[name])
    if name in _STANDARD_ACTIONS:
        return _STANDARD_ACTIONS[name]
    return "view" if request.method in permissions.SAFE_METHODS else "change"


class TenantRolePermission(permissions.BasePermission):
    """The tenant role (which grants the model permission), per request (``has_permission``) and per object."""

    message = "Your role in this tenant does not allow this."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_active):
            return False
        if request.method and not hasattr(view, request.method.lower()):
            return True  # the view answers 405 (a method no role could use), not a 403 that hints at a role
        model = view.queryset.model
        action = django_action(request, view)
        # A change or delete names one object: the role in its tenant decides (``has_object_permission``), after
        # the scoped lookup, so another tenant's object is a 404 exactly like a missing one.
        if not has_model_permission(user, "view" if action in ("change", "delete") else action, model):
            return False
        if action == "add":
            access, minimum = access_for(user), required_role(model, "add")
            return access.is_superuser or (minimum is not None and bool(access.tenant_ids(minimum)))
        return True

    def has_object_permission(self, request: Request, view: Any, obj: models.Model) -> bool:
        check = {"view": can_view, "delete": can_delete}.get(django_action(request, view), can_change)
        return check(request.user, obj)
