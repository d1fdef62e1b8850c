"""The admin's look on django-unfold: ``sidebar(request)``, unfold's ``SIDEBAR["navigation"]`` callable, offering
exactly the pages the user may open, mcp_app's grouped by ``GROUPS`` (docs/admin.md, "The sidebar"), with a count
beside the pages in ``BADGES`` (approvals waiting for a decision).

Not owned here: who may see what (each ModelAdmin), the dashboard (``mcp_app.admin.dashboard``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

from .approvals import pending_count

#: mcp_app's groups: title, then (model name, icon) in order. Icons are Material Symbols names.
GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Tenants", (("tenant", "domain"), ("tenantmembership", "group"), ("apikey", "key"))),
    (
        "Servers",
        (
            ("mcpserver", "dns"),
            ("servertool", "link"),
            ("serverresource", "link"),
            ("serverprompt", "link"),
            ("catalogversion", "history"),
            ("catalogchange", "difference"),
        ),
    ),
    ("Catalog", (("tool", "build"), ("resource", "description"), ("prompt", "chat"), ("upstream", "hub"))),
    (
        "Agents",
        (("agent", "smart_toy"), ("agenttoken", "token"), ("oauthconsent", "verified_user"), ("oauthagent", "badge")),
    ),
    (
        "Runtime",
        (
            ("tooltask", "pending_actions"),
            ("approval", "approval"),
            ("mcpsession", "cable"),
            ("toolcall", "receipt_long"),
        ),
    ),
    (
        "Budgets",
        (
            ("budget", "savings"),
            ("usageday", "table_rows"),
            ("budgetalert", "notifications"),
            ("budgetalerthook", "webhook"),
        ),
    ),
)
#: Sidebar titles other than the model's plural name.
TITLES = {"usageday": "Usage ledger"}
#: Pages whose sidebar entry carries a count (shown when not zero): model name → ``count(request)``.
BADGES: dict[str, Callable[[HttpRequest], int]] = {"approval": pending_count}
_OTHER_ICON = "folder"


def sidebar(request: HttpRequest) -> list[dict[str, Any]]:
    """Unfold's navigation for this request: only pages the user may open."""
    apps = admin.site.get_app_list(request)
    ours: dict[str, Any] = next(
        (app for app in apps if app["app_label"] == "mcp_app"), {"name": "mcp_app", "models": []}
    )
    others = [app for app in apps if app is not ours]
    models = {model["object_name"].lower(): model for model in ours["models"]}

    overview = [{"title": "Dashboard", "icon": "dashboard", "link": reverse("admin:index")}]
    if "toolcall" in models:
        overview.append({"title": "Usage", "icon": "bar_chart", "link": reverse("admin:mcp_app_toolcall_usage")})
    navigation: list[dict[str, Any]] = [{"title": "Overview", "separator": False, "items": overview}]
    for title, entries in GROUPS:
        items = [
            _item(models[name], icon, TITLES.get(name), BADGES.get(name), request)
            for name, icon in entries
            if models.get(name, {}).get("admin_url")
        ]
        if items:
            navigation.append({"title": title, "separator": True, "collapsible": False, "items": items})
    grouped = {name for _, entries in GROUPS for name, _ in entries}
    ungrouped = [model for name, model in models.items() if name not in grouped]
    if ungrouped:
        # A page registered without a place above still shows (under mcp_app's name), never vanishes.
        others.insert(0, {"name": ours["name"], "models": ungrouped})
    for app in others:
        items = [_item(model, _OTHER_ICON) for model in app["models"] if model.get("admin_url")]
        if items:
            navigation.append({"title": app["name"], "separator": True, "collapsible": True, "items": items})
    return navigation


def _item(
    model: dict[str, Any],
    icon: str,
    title: str | None = None,
    badge: Callable[[HttpRequest], int] | None = None,
    request: HttpRequest | None = None,
) -> dict[str, Any]:
    item = {"title": title or model["name"], "icon": icon, "link": model["admin_url"]}
    count = badge(request) if badge is not None and request is not None else 0
    if count:
        item["badge"] = count  # a number, not a dotted path: unfold shows it as it is
    return item
