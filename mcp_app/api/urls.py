"""URLs of the API, mounted with ``path("api/", include("mcp_app.api.urls"))``: ``/api/v1/`` (the root and the
resources), ``/api/schema/`` (OpenAPI 3) and ``/api/docs/`` (Swagger UI, offline). See docs/api.md.
"""

from __future__ import annotations

from django.urls import include, path, re_path
from rest_framework.routers import DefaultRouter

from . import approvals, budgets, versions, views
from .schema import OfflineSwaggerView, SchemaView

app_name = "mcp_api"


class Router(DefaultRouter):
    APIRootView = views.ApiRootView  # the API's own authentication, renderers and throttles, not the project's


router = Router()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.TenantMembershipViewSet, basename="membership")
router.register("servers", views.McpServerViewSet, basename="server")
router.register("tools", views.ToolViewSet, basename="tool")
router.register("resources", views.ResourceViewSet, basename="resource")
router.register("prompts", views.PromptViewSet, basename="prompt")
router.register("upstreams", views.UpstreamViewSet, basename="upstream")
router.register("server-tools", views.ServerToolViewSet, basename="server-tool")
router.register("server-resources", views.ServerResourceViewSet, basename="server-resource")
router.register("server-prompts", views.ServerPromptViewSet, basename="server-prompt")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("tokens", views.AgentTokenViewSet, basename="token")
router.register("sessions", views.McpSessionViewSet, basename="session")
router.register("tool-calls", views.ToolCallViewSet, basename="tool-call")
router.register("usage", views.UsageViewSet, basename="usage")
router.register("api-keys", views.ApiKeyViewSet, basename="api-key")
router.register("oauth-consents", views.OAuthConsentViewSet, basename="oauth-consent")
router.register("oauth-agents", views.OAuthAgentViewSet, basename="oauth-agent")
router.register("budgets", budgets.BudgetViewSet, basename="budget")
router.register("budget-alerts", budgets.BudgetAlertViewSet, basename="budget-alert")
router.register("approvals", approvals.ApprovalViewSet, basename="approval")
router.register("catalog-versions", versions.CatalogVersionViewSet, basename="catalog-version")
router.register("catalog-changes", versions.CatalogChangeViewSet, basename="catalog-change")

# One per tenant (``?tenant=<id>``): a resource, not a list, so not the router's.
hook = budgets.BudgetAlertHookViewSet

# A server's catalog: its draft, diffs and the verbs that publish (actions on a server, beside the router's).
catalog = versions.ServerCatalogViewSet
SERVER = f"v1/servers/(?P<pk>{views.PK_PATTERN})"

urlpatterns = [
    path(
        "v1/budget-alert-hook/",
        hook.as_view({"get": "retrieve", "put": "update", "delete": "destroy"}),
        name="budget-alert-hook",
    ),
    path("v1/budget-alert-hook/rotate/", hook.as_view({"post": "rotate"}), name="budget-alert-hook-rotate"),
    re_path(rf"^{SERVER}/draft/$", catalog.as_view({"get": "draft"}), name="server-draft"),
    re_path(rf"^{SERVER}/diff/$", catalog.as_view({"get": "diff"}), name="server-diff"),
    re_path(rf"^{SERVER}/publish/$", catalog.as_view({"post": "publish"}), name="server-publish"),
    re_path(rf"^{SERVER}/rollback/$", catalog.as_view({"post": "rollback"}), name="server-rollback"),
    path("v1/", include(router.urls)),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", OfflineSwaggerView.as_view(), name="docs"),
]
