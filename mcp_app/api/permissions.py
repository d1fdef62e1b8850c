"""DRF glue onto ``mcp_app.permissions``, the one module the admin and the API ask; no rule is decided here.

Each request maps to a Django action (view, add, change, delete; custom actions name theirs in the view's
``action_permissions``, any other unsafe one is a change) and is checked as the admin checks it: the model
permission and the role in the object's tenant (docs/api.md, "Who sees and does what").
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
