"""Admin of a tenant's catalog (tools, resources, prompts) and of the bindings that expose entries on servers.

A tool's page shows its kind's fields only; a Python tool is picked among the registered ones the operator
allowed; entries an upstream's sync imported are shown, not edited. Every entry has a "Try it" page.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from unfold.widgets import UnfoldAdminNullBooleanSelectWidget, UnfoldAdminSelectWidget

from .. import permissions
from ..definitions.registry import registry
from ..models import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from ..models.tenancy import python_tool_allowed
from .base import TenantScopedAdmin
from .http_tools import WebhookInline
from .schema_form import python_schemas
from .tryit import TryItMixin


def _allowed_python_tools(request: HttpRequest) -> list[str]:
    names = registry.names()
    if request.user.is_superuser:
        return names
    lists = list(permissions.editable_tenants(request.user).values_list("allowed_python_tools", flat=True))
    return [name for name in names if any(python_tool_allowed(allowed, name) for allowed in lists)]


def _schema_html(schema: dict[str, Any] | None) -> str:
    if schema is None:
        return format_html('<span class="text-base-500">{}</span>', "none (not registered, or no structured output)")
    return format_html(
        '<pre class="mcp-derived-schema text-sm whitespace-pre-wrap break-all max-w-3xl">{}</pre>',
        json.dumps(schema, indent=2, ensure_ascii=False),
    )


#: What each kind of tool is made of, besides the fields every tool has.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    Tool.Kind.PYTHON: ("python_name", "derived_input_schema", "derived_output_schema"),
    Tool.Kind.STATIC: (
        "input_schema",
        "output_schema",
        "static_result",
        "static_error",
        "static_cases",
        "static_delay_ms",
        "static_progress_steps",
    ),
    Tool.Kind.HTTP: ("input_schema", "output_schema"),
    # Imported by an upstream's sync: shown, not edited (the next sync would overwrite an edit).
    Tool.Kind.UPSTREAM: ("upstream_link", "remote_name", "input_schema", "output_schema"),
}
#: Kinds a person may choose on an add page (upstream entries come from syncs only).
HAND_MADE_KINDS = [kind for kind in KIND_FIELDS if kind != Tool.Kind.UPSTREAM]
#: What the add page edits (every hand-made kind's fields, the derived schemas aside), in order.
_EDITABLE = tuple(dict.fromkeys(f for kind in HAND_MADE_KINDS for f in KIND_FIELDS[kind] if "derived" not in f))
_COMMON = ("tenant", "name", "title", "description", "kind", "task_support")
#: ``Tool.requires_approval`` in words (unset, yes, no), as ``NullBooleanSelect`` posts them.
APPROVAL_CHOICES = [
    ("unknown", "Default rule (upstream tools marked destructive, unless the operator turned that off)"),
    ("true", "Always: each call waits for a tenant admin's approval"),
    ("false", "Never"),
]


class UpstreamEntryAdmin(TenantScopedAdmin):
    """Catalog entries that may come from an upstream: such an entry links to its upstream and shows its name
    there, its fields read-only (the upstream's next sync rewrites them); the add page never offers the kind."""

    list_select_related = ("tenant",)
    readonly_fields: tuple[str, ...] = ("created_at", "updated_at")
    #: Fields of an upstream entry shown read-only besides the link and the remote name.
    upstream_readonly: tuple[str, ...] = ()

    @admin.display(description="upstream")
    def upstream_link(self, obj: Any) -> str:
        if obj.upstream_id is None:
            return "—"
        url = reverse("admin:mcp_app_upstream_change", args=[obj.upstream_id])
        return format_html('<a class="text-primary-600 underline" href="{}">{}</a>', url, obj.upstream.name)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.kind == "upstream":
            fields += [f for f in ("upstream_link", "remote_name", *self.upstream_readonly) if f not in fields]
        return fields

    def formfield_for_choice_field(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "kind":
            kwargs["choices"] = [(value, label) for value, label in db_field.choices if value != "upstream"]
        return super().formfield_for_choice_field(db_field, request, **kwargs)


def _shown_for(field: str) -> str:
    """Unfold's Alpine condition for a kind's field on the add page (``kind`` is undefined where read-only)."""
    kinds = [kind for kind, fields in KIND_FIELDS.items() if field in fields]
    test = " || ".join(f"kind == '{kind}'" for kind in kinds)
    return f"typeof kind === 'undefined' || {test}"


@admin.register(Tool)
class ToolAdmin(TryItMixin, UpstreamEntryAdmin):
    """One page per kind: a tool shows only its kind's fields (fixed once it exists); the add page shows each
    kind's fields while it is chosen (``?kind=`` presets it). A Python tool shows its derived schemas."""

    list_display = ("name", "tenant", "kind", "title", "task_support", "updated_at")
    list_filter = ("kind", "task_support", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("name", "title", "description", "tenant__slug")
    readonly_fields = ("created_at", "updated_at", "derived_input_schema", "derived_output_schema")
    upstream_readonly = ("input_schema", "output_schema", "title", "description", "annotations", "icons")
    conditional_fields = {field: _shown_for(field) for field in _EDITABLE}
    inlines = [WebhookInline]

    def get_fieldsets(self, request: HttpRequest, obj: Tool | None = None) -> Any:
        if obj is None:
            kind = request.GET.get("kind")
            chosen = KIND_FIELDS[kind] if kind in HAND_MADE_KINDS else None
            behaviour = tuple(field for field in _EDITABLE if chosen is None or field in chosen)
        else:
            behaviour = KIND_FIELDS.get(obj.kind, ())
        fieldsets: list[tuple[str | None, dict[str, Any]]] = [
            (None, {"fields": _COMMON}),
            ("Behaviour", {"fields": behaviour}),
            ("Presentation", {"fields": ("annotations", "icons")}),
            ("Rate limit and price", {"fields": ("rate_limit", "rate_burst", "price")}),
            ("Approval", {"fields": ("requires_approval",)}),
        ]
        if obj is not None:
            fieldsets.append(("History", {"fields": ("created_at", "updated_at")}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Tool | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and "kind" not in fields:
            fields.append("kind")  # another kind is another tool: its fields and its page differ
        return fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        if request.GET.get("kind") in HAND_MADE_KINDS:
            initial["kind"] = request.GET["kind"]
        return initial

    def get_inlines(self, request: HttpRequest, obj: Tool | None) -> Any:
        # The webhook belongs to http tools only (on the add page it shows while "http" is chosen).
        if obj is not None and obj.kind != Tool.Kind.HTTP:
            return []
        kind = request.GET.get("kind")
        if obj is None and kind in HAND_MADE_KINDS and kind != Tool.Kind.HTTP:
            return []
        return super().get_inlines(request, obj)

    @admin.display(description="input schema (derived from type hints)")
    def derived_input_schema(self, obj: Tool) -> str:
        return _schema_html(python_schemas(obj)[0])

    @admin.display(description="output schema (derived from type hints)")
    def derived_output_schema(self, obj: Tool) -> str:
        return _schema_html(python_schemas(obj)[1])

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "python_name":
            return forms.ChoiceField(
                label=db_field.verbose_name.capitalize(),
                required=False,
                choices=[("", "—"), *((name, name) for name in _allowed_python_tools(request))],
                widget=UnfoldAdminSelectWidget,
                help_text="For Python tools: the registered tool (@tool) to run; the operator decides which ones "
                "each tenant may use.",
            )
        if db_field.name == "requires_approval":
            widget = UnfoldAdminNullBooleanSelectWidget()
            widget.choices = APPROVAL_CHOICES
            field = super().formfield_for_dbfield(db_field, request, widget=widget, **kwargs)
            field.required = False
            return field
        return super().formfield_for_dbfield(db_field, request, **kwargs)


class BindingAdmin(TenantScopedAdmin):
    """A binding belongs to its server's tenant; server and entry are picked by autocomplete."""

    tenant_field = "server"
    list_filter = ("enabled", ("server__tenant", admin.RelatedOnlyFieldListFilter))


@admin.register(ServerTool)
class ServerToolAdmin(BindingAdmin):
    list_display = ("__str__", "server", "tool", "enabled", "position", "execution", "timeout_seconds")
    list_select_related = ("server", "tool", "server__tenant")
    search_fields = ("tool__name", "name_override", "server__server_id")
    autocomplete_fields = ("server", "tool")


@admin.register(Resource)
class ResourceAdmin(TryItMixin, UpstreamEntryAdmin):
    list_display = ("uri", "name", "tenant", "kind", "is_template", "mime_type", "updated_at")
    list_filter = ("kind", "is_template", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("uri", "name", "title", "tenant__slug")


@admin.register(Prompt)
class PromptAdmin(TryItMixin, UpstreamEntryAdmin):
    list_display = ("name", "tenant", "kind", "title", "updated_at")
    list_filter = ("kind", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("name", "title", "description", "tenant__slug")


@admin.register(ServerResource)
class ServerResourceAdmin(BindingAdmin):
    list_display = ("__str__", "server", "resource", "enabled", "position")
    list_select_related = ("server", "resource", "server__tenant")
    search_fields = ("resource__uri", "resource__name", "server__server_id")
    autocomplete_fields = ("server", "resource")


@admin.register(ServerPrompt)
class ServerPromptAdmin(BindingAdmin):
    list_display = ("__str__", "server", "prompt", "enabled", "position")
    list_select_related = ("server", "prompt", "server__tenant")
    search_fields = ("prompt__name", "server__server_id")
    autocomplete_fields = ("server", "prompt")
