"""Admin of agents and their tokens. Tokens are issued through ``AgentToken.objects.issue_token`` (the raw value
shown once in a message) and revoked through ``AgentToken.revoke``; a token's choices are its agent's tenant's
servers and entries (the agent from the form, or ``?agent=<pk>`` from the agent page's "Issue a token" link).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from unfold.admin import TabularInline

from .. import operations, permissions
from ..models import Agent, AgentToken
from ..models.agents import GRANT_RELATIONS
from . import quotas
from .base import TenantScopedAdmin, TenantScopedInline

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups


class AgentTokenInline(TenantScopedInline, TabularInline):
    model = AgentToken
    extra = 0
    can_delete = False
    fields = ("prefix", "name", "created_at", "expires_at", "revoked_at", "last_used_at")
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    has_change_permission = has_add_permission


@admin.register(Agent)
class AgentAdmin(quotas.RunningWorkerCalls, TenantScopedAdmin):
    quota_scope = quotas.AGENT
    change_form_template = "admin/mcp_app/change_form_links.html"
    list_display = ("agent_id", "name", "tenant", "is_active", "running_worker_calls", "created_at")
    list_filter = ("is_active", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("agent_id", "name", "tenant__slug")
    readonly_fields = ("created_at", "running_worker_calls")
    inlines = [AgentTokenInline]
    edited_fields = ("tenant", "agent_id", "name", "is_active", "max_worker_calls", "rate_limit", "rate_burst")

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        links = []
        agent = self.get_object(request, object_id)
        if permissions.can_add(request.user, agent.tenant, AgentToken):
            links.append((reverse("admin:mcp_app_agenttoken_add") + f"?agent={agent.pk}", "Issue a token"))
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "object_links": links})


#: What a token's form edits: also what its page shows, before the read-only digest and timestamps.
TOKEN_FIELDS = ("agent", "name", "servers", "limit_to_grant", *GRANT_RELATIONS, "read_only", "expires_at")


class AgentTokenForm(forms.ModelForm):
    class Meta:
        model = AgentToken
        fields = TOKEN_FIELDS

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        agent = data.get("agent") or (self.instance.agent if self.instance.agent_id else None)
        if agent is not None:
            chosen = {name: data.get(name) for name in ("servers", *GRANT_RELATIONS)}
            for name, foreign in AgentToken.objects.outside_tenant(agent, chosen).items():
                self.add_error(name, f"Not of the agent's tenant: {', '.join(map(str, foreign))}.")
        return data


@admin.register(AgentToken)
class AgentTokenAdmin(TenantScopedAdmin):
    form = AgentTokenForm
    tenant_field = "agent"
    list_display = ("__str__", "name", "agent", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = (("agent__tenant", admin.RelatedOnlyFieldListFilter), ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("agent", "agent__tenant")
    search_fields = ("prefix", "name", "agent__agent_id")
    autocomplete_fields = ("agent",)
    filter_horizontal = ("servers", *GRANT_RELATIONS)
    readonly_fields = ("prefix", "digest", "created_at", "revoked_at", "last_used_at")
    actions = ["revoke_tokens"]

    def get_fields(self, request: HttpRequest, obj: AgentToken | None = None) -> _FieldGroups:
        return list(TOKEN_FIELDS if obj is None else (*TOKEN_FIELDS, *self.readonly_fields))

    def _agent_of_request(self, request: HttpRequest) -> Agent | None:
        """The agent a new token is for, when the form or the link names one the user may issue tokens for."""
        raw = request.POST.get("agent") or request.GET.get("agent")
        if not raw or not str(raw).isdigit():
            return None
        agents = permissions.scope_queryset(request.user, Agent.objects.all(), permissions.ADMIN)
        return agents.filter(pk=int(raw)).first()

    def get_form(self, request: HttpRequest, obj: AgentToken | None = None, change: bool = False, **kwargs: Any) -> Any:
        # A new token's choices: its agent's tenant's servers and entries only, once the agent is known.
        owner = obj if obj is not None else self._agent_of_request(request)
        return self._building_for(
            request, owner, lambda: super(TenantScopedAdmin, self).get_form(request, obj, change, **kwargs)
        )

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        if not permissions.can_add(request.user, obj):
            raise PermissionDenied
        token, raw = AgentToken.objects.issue_token(
            obj.agent,
            name=obj.name,
            expires_at=obj.expires_at,
            tools=[] if obj.limit_to_grant else None,  # the chosen entries are set with the form's M2M data
            read_only=obj.read_only,
        )
        obj.pk = token.pk
        obj.prefix, obj.digest, obj.created_at = token.prefix, token.digest, token.created_at
        obj._state.adding = False
        messages.warning(
            request,
            format_html(
                'New token for {}: <code id="mcp-new-token">{}</code> — copy it now; it is never shown again.',
                obj.agent.agent_id,
                raw,
            ),
        )

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        self.message_user(request, f"Revoked {operations.revoke(queryset)} token(s).")
