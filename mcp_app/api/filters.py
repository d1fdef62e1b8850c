"""Query-string filters of the list endpoints (django-filter). Foreign keys are plain integer filters over the
scoped queryset, so another tenant's id gives an empty page, exactly like a missing one (a choice filter's 400
would tell them apart).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField

from ..models import (
    Agent,
    AgentToken,
    Approval,
    Budget,
    BudgetAlert,
    CatalogChange,
    CatalogVersion,
    McpServer,
    McpSession,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    TenantMembership,
    Tool,
    ToolCall,
    Upstream,
)
from ..models.catalog import CatalogBinding
from ..operations import approvals_with_status

MAX_ID = 2**63 - 1


class IdField(forms.IntegerField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class IdFilter(filters.NumberFilter):
    field_class = IdField


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC: every database compares it, whatever offset it was sent with
    (PostgreSQL refuses offsets beyond ±15:59, and converting near year 1 or 9999 can overflow)."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError) as exc:
            raise forms.ValidationError("Date-time out of range.", code="invalid") from exc


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class TenantFilter(filters.FilterSet):
    class Meta:
        model = Tenant
        fields = {"slug": ["exact"], "is_active": ["exact"]}


class TenantScopedFilter(filters.FilterSet):
    tenant = IdFilter(field_name="tenant_id", help_text="Tenant id.")
    tenant_slug = filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")


class TenantMembershipFilter(TenantScopedFilter):
    user = filters.CharFilter(field_name="user__username", help_text="Username.")

    class Meta:
        model = TenantMembership
        fields = ("tenant", "tenant_slug", "user", "role")


def tenant_scoped(model: type[Any], *fields: str) -> type[TenantScopedFilter]:
    """The filter set of a tenant's ``model``: by tenant (id or slug) and by ``fields`` (exact)."""
    meta = type("Meta", (), {"model": model, "fields": ("tenant", "tenant_slug", *fields)})
    return type(f"{model.__name__}Filter", (TenantScopedFilter,), {"Meta": meta})


McpServerFilter = tenant_scoped(McpServer, "server_id", "enabled")
ToolFilter = tenant_scoped(Tool, "name", "kind", "task_support")
UpstreamFilter = tenant_scoped(Upstream, "name", "enabled")
ResourceFilter = tenant_scoped(Resource, "uri", "kind", "is_template")
PromptFilter = tenant_scoped(Prompt, "name", "kind")
AgentFilter = tenant_scoped(Agent, "agent_id", "is_active")


class BudgetFilter(TenantScopedFilter):
    agent = IdFilter(field_name="agent_id", help_text="Agent id.")
    whole_tenant = filters.BooleanFilter(
        field_name="agent", lookup_expr="isnull", help_text="true: tenant-wide budgets only; false: agents' only."
    )

    class Meta:
        model = Budget
        fields = ("tenant", "tenant_slug", "agent", "whole_tenant", "set_by")


class BudgetAlertFilter(TenantScopedFilter):
    budget = IdFilter(field_name="budget_id", help_text="Budget id.")

    class Meta:
        model = BudgetAlert
        fields = ("tenant", "tenant_slug", "budget", "metric", "period")


class CatalogVersionFilter(TenantScopedFilter):
    server = IdFilter(field_name="server_id", help_text="Server id.")

    class Meta:
        model = CatalogVersion
        fields = ("tenant", "tenant_slug", "server", "source")


class CatalogChangeFilter(TenantScopedFilter):
    server = IdFilter(field_name="server_id", help_text="Server id.")
    upstream = IdFilter(field_name="upstream_id", help_text="Upstream id.")

    class Meta:
        model = CatalogChange
        fields = ("tenant", "tenant_slug", "server", "upstream", "status", "change", "list_name")


class ServerRowFilter(filters.FilterSet):
    """The filters of a row about one server (a binding, a session): by server, and by the server's tenant."""

    server = IdFilter(field_name="server_id", help_text="Server id.")
    tenant = IdFilter(field_name="server__tenant_id", help_text="Tenant id.")


def binding_filter(model: type[CatalogBinding]) -> type[ServerRowFilter]:
    """The filter set of one kind of binding: by server, tenant, entry (ids) and ``enabled``."""
    entry = model.entry_field()
    meta = type("Meta", (), {"model": model, "fields": ("server", "tenant", entry, "enabled")})
    own = IdFilter(field_name=f"{entry}_id", help_text=f"{entry.capitalize()} id.")
    return type(f"{model.__name__}Filter", (ServerRowFilter,), {entry: own, "Meta": meta})


ServerToolFilter = binding_filter(ServerTool)
ServerResourceFilter = binding_filter(ServerResource)
ServerPromptFilter = binding_filter(ServerPrompt)


class AgentTokenFilter(filters.FilterSet):
    agent = IdFilter(field_name="agent_id", help_text="Agent id.")
    tenant = IdFilter(field_name="agent__tenant_id", help_text="Tenant id.")
    server = IdFilter(field_name="servers", help_text="Tokens scoped to this server id.", distinct=True)
    revoked = filters.BooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)
    prefix = filters.CharFilter(field_name="prefix")

    class Meta:
        model = AgentToken
        fields = ("agent", "tenant", "server", "revoked", "prefix")


class McpSessionFilter(ServerRowFilter):
    agent = IdFilter(field_name="agent_id", help_text="Agent id.")
    terminated = filters.BooleanFilter(field_name="terminated_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = McpSession
        fields = ("server", "agent", "tenant", "terminated", "protocol_version")


class ToolCallFilter(TenantScopedFilter):
    server = IdFilter(field_name="server_id", help_text="Server id.")
    agent = IdFilter(field_name="agent_id", help_text="Agent id.")
    tool = filters.CharFilter(field_name="tool_name", help_text="Tool name as called.")
    started_after = UtcDateTimeFilter(field_name="started_at", lookup_expr="gte", help_text="ISO 8601, inclusive.")
    started_before = UtcDateTimeFilter(field_name="started_at", lookup_expr="lt", help_text="ISO 8601, exclusive.")

    class Meta:
        model = ToolCall
        fields = (
            "tenant",
            "tenant_slug",
            "server",
            "agent",
            "tool",
            "status",
            "era",
            "started_after",
            "started_before",
        )


class ApprovalFilter(TenantScopedFilter):
    """``status`` as the API shows it: ``pending`` excludes, and ``expired`` includes, requests past their expiry
    that the sweep has not marked yet."""

    status = filters.ChoiceFilter(choices=Approval.Status.choices, method="filter_status", help_text="As of now.")
    server = IdFilter(field_name="server_id", help_text="Server id.")
    agent = IdFilter(field_name="agent_id", help_text="Agent id.")
    tool = filters.CharFilter(field_name="tool_name", help_text="Tool name as the server exposes it.")

    class Meta:
        model = Approval
        fields = ("tenant", "tenant_slug", "status", "server", "agent", "tool")

    def filter_status(self, queryset: Any, name: str, value: str) -> Any:
        return approvals_with_status(queryset, value)
