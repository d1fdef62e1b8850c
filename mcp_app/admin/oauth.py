"""Admin of OAuth consents and OAuth agents (``mcp_app.models.oauth``), read-only and tenant-scoped: consents are
given on the consent page and withdrawn here (their tokens stop working). The tokens are agent tokens
(``AgentToken`` admin); OAuth clients are DOT's own "Applications" admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..models import OAuthAgent, OAuthConsent
from ..models.agents import GRANT_RELATIONS
from .base import TenantScopedAdmin


@admin.register(OAuthConsent)
class OAuthConsentAdmin(TenantScopedAdmin):
    tenant_field = "server"
    read_only_model = True
    list_display = ("user", "application", "server", "grant", "agent", "created_at", "updated_at")
    list_filter = (("server__tenant", admin.RelatedOnlyFieldListFilter),)
    list_select_related = ("user", "application", "server", "agent")
    search_fields = ("user__username", "application__name", "application__client_id", "server__server_id")
    exclude = GRANT_RELATIONS
    actions = ["withdraw"]

    @admin.display(description="grant")
    def grant(self, consent: OAuthConsent) -> str:
        if consent.limit_to_grant:
            return "chosen entries"
        return "read-only tools" if consent.read_only else "everything"

    @admin.action(description="Withdraw selected consents (their tokens stop working)", permissions=["change"])
    def withdraw(self, request: HttpRequest, queryset: QuerySet[OAuthConsent]) -> None:
        count = OAuthConsent.objects.get_queryset().filter(pk__in=queryset.values("pk")).withdraw()
        self.message_user(request, f"{count} consent(s) withdrawn.", messages.SUCCESS)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # withdraw instead: it revokes the tokens first


@admin.register(OAuthAgent)
class OAuthAgentAdmin(TenantScopedAdmin):
    read_only_model = True
    list_display = ("agent", "user", "application", "tenant", "created_at")
    list_filter = (("tenant", admin.RelatedOnlyFieldListFilter),)
    list_select_related = ("agent", "user", "application", "tenant")
    search_fields = ("agent__agent_id", "user__username", "application__name")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
