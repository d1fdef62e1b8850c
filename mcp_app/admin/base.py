"""What every mcp_app ModelAdmin and inline shares: ``TenantScopedAdmin`` and ``TenantScopedInline`` scope
querysets, permissions, actions and choices to the user's tenants through ``mcp_app.permissions`` (which owns the
rules); ``JSONEditor`` / ``PrettyJSONField`` edit JSON fields. Design: docs/admin.md ("Tenant scoping").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.utils.html import conditional_escape
from unfold.admin import ModelAdmin

from .. import permissions
from ..models import Tenant


class JSONEditor(forms.Textarea):
    """JSON edited in jsoneditor's code mode (django-json-widget's assets), the parse error marked while typing;
    the value travels as typed, so invalid JSON reaches the form field, which says where it went wrong."""

    template_name = "admin/mcp_app/widgets/json_editor.html"

    class Media:
        js = ("dist/jsoneditor.min.js", "mcp_app/admin/json_editor.js")
        css = {"all": ("dist/jsoneditor.min.css", "mcp_app/admin/json_editor.css")}

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs={"class": "vLargeTextField mcp-json", **(attrs or {})})

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        lines = str(value or "").count("\n") + 1
        context["widget"]["editor_height"] = 20 * max(4, min(lines + 2, 24))
        return context


class PrettyJSONField(forms.JSONField):
    """A JSON form field that shows its value indented and says where invalid JSON went wrong."""

    widget = JSONEditor
    default_error_messages = {"invalid": "Enter valid JSON: %(error)s"}

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        if value is None:
            return ""  # an empty editor, not the word null (an empty field saves as None again)
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)

    def to_python(self, value: Any) -> Any:
        if self.disabled or value in self.empty_values:
            return super().to_python(value)
        try:
            json.loads(value, cls=self.decoder)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                self.error_messages["invalid"], code="invalid", params={"error": f"{exc.msg} (line {exc.lineno})"}
            ) from exc
        return super().to_python(value)


class _ScopedChoices:
    """Foreign-key, many-to-many and help-text handling shared by ModelAdmins and inlines."""

    @staticmethod
    def _building_for(request: HttpRequest, obj: Any, build: Callable[[], Any]) -> Any:
        """Build a form class while the choices know the tenant of ``obj`` (the object, or an inline's parent)."""
        previous = getattr(request, "_mcp_form_tenant_id", None)
        request._mcp_form_tenant_id = permissions.tenant_id_of(obj) if obj is not None else None  # type: ignore[attr-defined]
        try:
            return build()
        finally:
            request._mcp_form_tenant_id = previous  # type: ignore[attr-defined]

    def _scope_choices(self, request: HttpRequest, db_field: Any, kwargs: dict[str, Any]) -> None:
        related = db_field.remote_field.model
        if related is Tenant:
            kwargs["queryset"] = permissions.editable_tenants(request.user, self._tenant_role())
        elif related._meta.label_lower in permissions.TENANT_PATHS:
            base = kwargs.get("queryset", related._default_manager.all())
            scoped = permissions.scope_queryset(request.user, base, permissions.ADMIN)
            tenant_id = getattr(request, "_mcp_form_tenant_id", None)
            if tenant_id is not None:
                scoped = permissions.in_tenant(scoped, tenant_id)  # the form's object's tenant only
            kwargs["queryset"] = scoped

    def _tenant_role(self) -> str:
        """The role a tenant must grant for new objects of this model to go into it (owner for memberships)."""
        return permissions.required_role(self.model, "add") or permissions.OWNER  # type: ignore[attr-defined]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        self._scope_choices(request, db_field, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        self._scope_choices(request, db_field, kwargs)
        return super().formfield_for_manytomany(db_field, request, **kwargs)  # type: ignore[misc]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if isinstance(db_field, models.JSONField):
            kwargs.setdefault("form_class", PrettyJSONField)
            kwargs.setdefault("widget", JSONEditor)
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)  # type: ignore[misc]
        if formfield is not None and formfield.help_text:
            # The admin renders help texts as HTML; ours are plain text ("/mcp/<server id>").
            formfield.help_text = conditional_escape(formfield.help_text)
        return formfield


def _somewhere(request: HttpRequest, model: type[models.Model], action: str) -> bool:
    """Whether the user may do ``action`` on ``model`` in at least one tenant."""
    if not permissions.has_model_permission(request.user, action, model):
        return False
    access = permissions.access_for(request.user)
    if access.is_superuser:
        return True
    role = permissions.required_role(model, action)
    return role is not None and bool(access.tenant_ids(role))


_CAN = {"view": permissions.can_view, "change": permissions.can_change, "delete": permissions.can_delete}


class TenantScopedAdmin(_ScopedChoices, ModelAdmin):
    """A ModelAdmin whose every page is limited to the user's tenants (docs/admin.md). ``tenant_field`` ties a new
    object to its tenant, read-only once it exists; ``read_only_model``: no add or edit forms (actions remain)."""

    tenant_field: str | None = "tenant"
    read_only_model = False
    #: Records nobody deletes by hand that go with what they belong to (a server's catalog versions): deleting
    #: their owner needs no delete permission on them.
    deleted_with_owner = False

    class Media:
        css = {"all": ("mcp_app/admin/admin.css",)}  # mcp-host's layout rules (widths, dashboard, progress)

    # -- querysets ----------------------------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return permissions.scope_queryset(request.user, super().get_queryset(request))

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            # Another tenant's object and a missing one look the same: 404, not a redirect that says "deleted".
            raise Http404(f"No {self.opts.verbose_name} with this id.")
        return obj

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], search_term: str) -> Any:
        queryset, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == "autocomplete":
            # Autocomplete offers choices for a form: only objects the user may attach things to.
            queryset = permissions.scope_queryset(request.user, queryset, permissions.ADMIN)
        return queryset, may_have_duplicates

    # -- permissions --------------------------------------------------------------------------------------------
    def has_module_permission(self, request: HttpRequest) -> bool:
        # Django asks for any permission of the app; a tenant member's role grants them (no group needed).
        return _somewhere(request, self.model, "view")

    def _may(self, request: HttpRequest, action: str, obj: Any) -> bool:
        """``action`` on ``obj`` (the role on its tenant decides), or without an object, in some tenant."""
        if obj is None:
            return _somewhere(request, self.model, action)
        return _CAN[action](request.user, obj)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, "view", obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, "change", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, "delete", obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not self.read_only_model and _somewhere(request, self.model, "add")

    # -- actions: only what the user may change, whatever was selected -------------------------------------------
    def get_actions(self, request: HttpRequest) -> dict[str, tuple[Callable[..., str], str, str] | None]:
        actions = super().get_actions(request).items()
        return {name: (self._scoped_action(action[0]), name, action[2]) for name, action in actions if action}

    def _scoped_action(self, func: Callable[..., Any]) -> Callable[..., Any]:
        needed = getattr(func, "allowed_permissions", ("change",))
        action = "delete" if "delete" in needed else "change"

        @functools.wraps(func)  # its description and allowed_permissions too
        def scoped(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
            role = permissions.required_role(modeladmin.model, action)
            if role is None and not request.user.is_superuser:
                return None
            allowed = queryset if role is None else permissions.scope_queryset(request.user, queryset, role)
            return func(modeladmin, request, allowed)

        return scoped

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        records = {
            str(model_admin.opts.verbose_name)
            for model_admin in self.admin_site._registry.values()
            if getattr(model_admin, "deleted_with_owner", False)
        }
        return deleted, counts, perms_needed - records, protected

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # The forms only offer the user's tenants; this is the last line should a form ever offer more.
        allowed = permissions.can_change(request.user, obj) if change else permissions.can_add(request.user, obj)
        if not allowed:
            raise PermissionDenied
        super().save_model(request, obj, form, change)

    # -- forms --------------------------------------------------------------------------------------------------
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if self.read_only_model:
            hidden = set(self.exclude or ())
            return [*fields, *(f.name for f in self.opts.fields if f.editable and f.name not in {*fields, *hidden})]
        if obj is not None and self.tenant_field and self.tenant_field not in fields:
            fields.append(self.tenant_field)
        return fields

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        return self._building_for(
            request, obj, lambda: super(TenantScopedAdmin, self).get_form(request, obj, change, **kwargs)
        )

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> Any:
        if self.read_only_model:
            buttons = ("show_save", "show_save_and_continue", "show_save_and_add_another")
            extra_context = {**(extra_context or {}), **dict.fromkeys(buttons, False)}
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        if self.tenant_field == "tenant" and "tenant" not in initial:
            tenant = permissions.default_tenant(request.user, self._tenant_role())
            if tenant is not None:
                initial["tenant"] = str(tenant.pk)
        return initial

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        formfield = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "tenant" and db_field.remote_field.model is Tenant and formfield is not None:
            only = permissions.default_tenant(request.user, self._tenant_role())
            if only is not None:
                # A user with one editable tenant never picks it: the field is preset and hidden.
                formfield.widget = forms.HiddenInput()
                formfield.initial = only.pk
                formfield.empty_label = None
        return formfield


class TenantScopedInline(_ScopedChoices):
    """Mixin for inlines: the parent object's permissions decide, querysets and choices are scoped."""

    model: type[models.Model]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return permissions.scope_queryset(request.user, super().get_queryset(request))  # type: ignore[misc]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        return self._building_for(
            request,
            obj,
            lambda: super(TenantScopedInline, self).get_formset(request, obj, **kwargs),  # type: ignore[misc]
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return _somewhere(request, self.model, "view")
        return permissions.can_view(request.user, obj) and permissions.has_model_permission(
            request.user, "view", self.model
        )

    def _parent_allows(self, request: HttpRequest, obj: Any, action: str) -> bool:
        if not permissions.has_model_permission(request.user, action, self.model):
            return False
        if obj is None:
            return _somewhere(request, self.model, action)
        tenant_id = permissions.tenant_id_of(obj)
        return permissions.access_for(request.user).has_role(tenant_id, permissions.required_role(self.model, action))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._parent_allows(request, obj, "change")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._parent_allows(request, obj, "add")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._parent_allows(request, obj, "delete")
