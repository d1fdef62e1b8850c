"""Catalog versions in the admin (docs/admin.md, "Catalog versions"): per server, the versions page (its versions
and its draft with their digests), a diff between any two (entries added, removed, and changed field by field),
and the confirmation pages that publish the draft or roll back to a version (POST, CSRF, a message after); the
read-only lists of every version and of held upstream changes, each change with its diff and a link to publish
its server's draft (approving a held change is publishing the draft: one verb).

Tenant-scoped like every other page: the server is looked up in the user's tenants (another tenant's is a 404),
publishing and rolling back need the role that changes it (else 403). The verbs are ``catalog.versions``'s, what
is compared ``catalog.comparison``'s; nothing here decides either.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods

from .. import permissions
from ..catalog import comparison
from ..catalog.versions import EntryDiff, publish, rollback
from ..models import CatalogChange, CatalogVersion, McpServer, Upstream
from .audit import scoped_filter
from .base import TenantScopedAdmin

NOTE_MAX = 500


def _shown(value: Any) -> str:
    """A definition or a field's value as indented JSON (an absent one as a dash)."""
    if value is None:
        return "—"
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def diff_rows(changes: list[EntryDiff]) -> list[dict[str, Any]]:
    """The diff as the templates show it: per entry its change, list and key; the whole definition of an added or
    removed entry, the old and new value of each changed field."""
    return [
        {
            "change": change.change,
            "list": change.list_name,
            "key": change.key,
            "definition": _shown(change.new if change.change == "added" else change.old),
            "fields": [(field.field, _shown(field.old), _shown(field.new)) for field in change.fields],
        }
        for change in changes
    ]


def render_diff(changes: list[EntryDiff]) -> str:
    return render_to_string("admin/mcp_app/catalog/diff_entries.html", {"changes": diff_rows(changes)})


def _url(name: str, server: McpServer, *args: Any) -> str:
    return reverse(f"admin:mcp_app_mcpserver_{name}", args=[server.pk, *args])


class ServerVersionPages:
    """The pages of one server's catalog versions, mounted under its change page by ``McpServerAdmin``:
    ``versions/``, ``versions/diff/?from=&to=``, ``versions/publish/`` and ``versions/rollback/<number>/``."""

    def __init__(self, model_admin: Any) -> None:
        self.model_admin = model_admin

    def urls(self) -> list[Any]:
        site, methods = self.model_admin.admin_site, require_http_methods(["GET", "POST"])
        return [
            path("<path:object_id>/versions/", site.admin_view(self.versions), name="mcp_app_mcpserver_versions"),
            path("<path:object_id>/versions/diff/", site.admin_view(self.diff), name="mcp_app_mcpserver_diff"),
            path(
                "<path:object_id>/versions/publish/",
                site.admin_view(methods(self.publish)),
                name="mcp_app_mcpserver_publish",
            ),
            path(
                "<path:object_id>/versions/rollback/<int:number>/",
                site.admin_view(methods(self.rollback)),
                name="mcp_app_mcpserver_rollback",
            ),
        ]

    # -- lookups ----------------------------------------------------------------------------------------------
    def _server(self, request: HttpRequest, object_id: str, *, change: bool = False) -> McpServer:
        server: McpServer = self.model_admin.get_object(request, object_id)  # 404 for another tenant's
        if not permissions.can_view(request.user, server):
            raise PermissionDenied
        if change and not permissions.can_change(request.user, server):
            raise PermissionDenied
        return server

    def _context(self, request: HttpRequest, server: McpServer, title: str, **values: Any) -> dict[str, Any]:
        return {
            **self.model_admin.admin_site.each_context(request),
            "opts": McpServer._meta,
            "original": server,  # unfold's header: MCP servers, then this server
            "title": title,
            "server": server,
            "server_url": reverse("admin:mcp_app_mcpserver_change", args=[server.pk]),
            "versions_url": _url("versions", server),
            "may_publish": permissions.can_change(request.user, server),
            **values,
        }

    # -- pages ------------------------------------------------------------------------------------------------
    def versions(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self._server(request, object_id)
        draft = comparison.snapshot(server, comparison.DRAFT)
        published = server.published_version
        rows = list(CatalogVersion.objects.filter(server=server).select_related("created_by").order_by("-number"))
        pending = list(
            CatalogChange.objects.filter(server=server).pending().select_related("upstream").order_by("-seen_at")
        )
        context = self._context(
            request,
            server,
            f"Catalog versions of {server.server_id}",
            draft=draft,
            draft_differs=published is None or published.digest != draft.digest,
            published=published,
            versions=[(version, len(version.entries or ())) for version in rows],
            pending=pending,
            publish_url=_url("publish", server),
            diff_url=_url("diff", server),
        )
        return TemplateResponse(request, "admin/mcp_app/catalog/versions.html", context)

    def diff(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self._server(request, object_id)
        try:
            old = comparison.parse_side(request.GET.get("from"), comparison.published_side(server))
            new = comparison.parse_side(request.GET.get("to"), comparison.DRAFT)
            result = comparison.compare(server, old, new)
        except (ValueError, comparison.UnknownVersion) as exc:
            raise Http404(str(exc)) from exc
        title = f"{server.server_id}: {result.old.label} → {result.new.label}"
        choices = [comparison.DRAFT, *CatalogVersion.objects.filter(server=server).values_list("number", flat=True)]
        context = self._context(
            request, server, title, result=result, diff=render_diff(result.changes), choices=choices, old=old, new=new
        )
        return TemplateResponse(request, "admin/mcp_app/catalog/diff.html", context)

    def publish(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self._server(request, object_id, change=True)
        if request.method == "POST":
            before = server.published_version_id
            note = request.POST.get("note", "").strip()[:NOTE_MAX]
            version = publish(server, user=request.user, note=note)
            if version.pk == before:
                messages.info(request, f"Nothing to publish: {server.server_id} already serves its draft.")
            else:
                messages.success(request, f"Published version {version.number} of {server.server_id}.")
            return HttpResponseRedirect(_url("versions", server))
        result = comparison.compare(server, comparison.published_side(server), comparison.DRAFT)
        pending = CatalogChange.objects.filter(server=server).pending().count()
        context = self._context(
            request,
            server,
            f"Publish the draft of {server.server_id}",
            result=result,
            diff=render_diff(result.changes),
            verb="Publish",
            action_url=_url("publish", server),
            with_note=True,
            pending=pending,
        )
        return TemplateResponse(request, "admin/mcp_app/catalog/confirm.html", context)

    def rollback(self, request: HttpRequest, object_id: str, number: int) -> HttpResponse:
        server = self._server(request, object_id, change=True)
        if not CatalogVersion.objects.filter(server=server, number=number).exists():
            raise Http404(f"{server.server_id} has no version {number}.")
        if request.method == "POST":
            version = rollback(server, number, user=request.user)
            messages.success(
                request, f"Rolled back {server.server_id} to version {number}: it serves version {version.number}."
            )
            return HttpResponseRedirect(_url("versions", server))
        result = comparison.compare(server, comparison.published_side(server), number)
        context = self._context(
            request,
            server,
            f"Roll {server.server_id} back to version {number}",
            result=result,
            diff=render_diff(result.changes),
            verb=f"Roll back to version {number}",
            action_url=_url("rollback", server, number),
            with_note=False,
        )
        return TemplateResponse(request, "admin/mcp_app/catalog/confirm.html", context)


class _ReadOnlyRows(TenantScopedAdmin):
    """Rows written by the versions' verbs only: listed and opened, never added, changed or deleted here."""

    read_only_model = True
    tenant_field = None
    deleted_with_owner = True

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    has_delete_permission = has_change_permission


@admin.register(CatalogVersion)
class CatalogVersionAdmin(_ReadOnlyRows):
    list_display = ("__str__", "short_digest", "source", "note", "created_by", "created_at", "pages")
    list_filter = (scoped_filter("server", McpServer), "source")
    list_select_related = ("server", "created_by")
    search_fields = ("server__server_id", "note", "=digest")
    ordering = ("-created_at",)
    fields = ("tenant", "server", "number", "digest", "source", "rolled_back_to", "note", "created_by", "created_at")
    readonly_fields = fields

    @admin.display(description="")
    def pages(self, obj: CatalogVersion) -> str:
        server = obj.server
        return format_html(
            '<a class="text-primary-600" href="{}">versions</a> · <a class="text-primary-600" href="{}?from={}&to=draft">'
            "diff with draft</a>",
            _url("versions", server),
            _url("diff", server),
            obj.number,
        )


@admin.register(CatalogChange)
class CatalogChangeAdmin(_ReadOnlyRows):
    list_display = ("key", "change", "list_name", "server", "upstream", "status", "seen_at")
    list_filter = ("status", scoped_filter("server", McpServer), scoped_filter("upstream", Upstream), "change")
    list_select_related = ("server", "upstream")
    search_fields = ("key",)
    ordering = ("-seen_at",)
    fields = (
        "server",
        "upstream",
        "list_name",
        "key",
        "change",
        "status",
        "diff_shown",
        "publish_link",
        "first_seen_at",
        "seen_at",
        "resolved_at",
        "resolved_in",
    )
    readonly_fields = fields

    def get_fields(self, request: HttpRequest, obj: CatalogChange | None = None) -> Any:
        fields = super().get_fields(request, obj)
        if obj is None or not permissions.can_change(request.user, obj.server):
            return [name for name in fields if name != "publish_link"]  # only those who may publish are offered it
        return fields

    @admin.display(description="diff")
    def diff_shown(self, obj: CatalogChange) -> str:
        return render_diff(comparison.change_diff(obj))

    @admin.display(description="approve")
    def publish_link(self, obj: CatalogChange) -> str:
        if obj.status != CatalogChange.Status.PENDING:
            return "-"
        return format_html(
            '<a class="text-primary-600" href="{}">Publish the draft of {}</a> (approves this change with the '
            "server's other pending changes)",
            _url("publish", obj.server),
            obj.server.server_id,
        )
