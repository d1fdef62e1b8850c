"""The admin of upstream MCP servers: register (a first sync on save), test, sync, close the breaker, see the
imported entries, bind the whole upstream to servers (``federation.sync.bind``/``unbind``); secrets write-only.
What it shows: docs/upstreams.md ("The admin").
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST
from unfold.admin import TabularInline
from unfold.widgets import UnfoldAdminPasswordWidget

from .. import permissions
from ..definitions.http_tools import display_url
from ..definitions.upstreams import ERA_AUTO
from ..federation import breaker
from ..federation.sync import bind, sync_upstream, unbind
from ..models import Prompt, Resource, Tool, Upstream, UpstreamBinding
from ..operations import probe_upstream
from .base import TenantScopedAdmin, TenantScopedInline
from .secrets import WriteOnlySecretsForm, clear_switch


class UpstreamForm(WriteOnlySecretsForm):
    write_only = {**WriteOnlySecretsForm.write_only, "oauth_client_secret": str}

    oauth_client_secret = forms.CharField(
        label="OAuth client secret",
        required=False,
        strip=False,
        widget=UnfoldAdminPasswordWidget(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted and never shown again; leave empty to keep the current one.",
    )
    clear_oauth_client_secret = clear_switch("remove the OAuth client secret")

    class Meta:
        model = Upstream
        fields = (
            "tenant",
            "name",
            "url",
            "prefix",
            "enabled",
            "headers",
            "oauth_client_id",
            "oauth_issuer",
            "oauth_scope",
            "timeout_seconds",
            "sync_interval_seconds",
            "era",
            "on_change",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("era", "on_change"):
            if name in self.fields:
                self.fields[name].required = False  # left out: auto, and the policy as it is

    def clean_era(self) -> str:
        return str(self.cleaned_data.get("era") or ERA_AUTO)

    def clean_on_change(self) -> str:
        return str(self.cleaned_data.get("on_change") or self.instance.on_change)


class UpstreamBindingInline(TenantScopedInline, TabularInline):
    """Servers exposing the whole upstream (every entry, also those later syncs add)."""

    model = UpstreamBinding
    fields = ("server", "created_at")
    readonly_fields = ("created_at",)
    extra = 0
    verbose_name = "server exposing the whole upstream"
    verbose_name_plural = "servers exposing the whole upstream"


def _report_message(request: HttpRequest, upstream: Upstream, report: Any, what: str = "Sync") -> None:
    if not report.ok:
        messages.error(request, f"{what} of {upstream.name} failed: {report.error}")
        return
    parts = [
        f"{len(names)} {label}{': ' + ', '.join(names[:10]) + ('…' if len(names) > 10 else '') if names else ''}"
        for label, names in (("added", report.added), ("updated", report.updated), ("removed", report.removed))
    ]
    messages.success(request, f"{what} of {upstream.name}: {'; '.join(parts)}.")
    for reason in report.skipped:
        messages.warning(request, f"Skipped: {reason}")
    for reason in report.flagged:
        messages.warning(request, f"Flagged: {reason}")


def _probe_message(request: HttpRequest, upstream: Upstream) -> None:
    result = probe_upstream(upstream)
    if not result["ok"]:
        messages.error(request, f"Could not reach {upstream.name}: {result['error']}")
        return
    info = result["server_info"] or {}
    offers = "; ".join(
        f"{len(names)} {kind.replace('_', ' ')}" + (f" ({', '.join(names[:10])})" if names else "")
        for kind, names in result["offers"].items()
    )
    messages.success(
        request,
        f"{upstream.name} answers: {info.get('name') or 'unnamed server'} {info.get('version') or ''}, "
        f"protocol {result['protocol_version']}. Offers {offers}. Nothing was imported (use Sync now).",
    )


def _close_breaker(request: HttpRequest, upstream: Upstream) -> None:
    breaker.reset(upstream.pk)
    messages.success(request, f"The circuit breaker of {upstream.name} is closed: calls go through again.")


#: How mcp-host authenticates to the upstream (the secrets write-only: ``admin.secrets``).
CREDENTIAL_FIELDS = (
    "headers",
    "secret_headers",
    "clear_secret_headers",
    "oauth_client_id",
    "oauth_client_secret",
    "clear_oauth_client_secret",
    "oauth_issuer",
    "oauth_scope",
)
#: The read-only state of an existing upstream, shown under "Health".
HEALTH_FIELDS = ("protocol_version", "remote_server", "last_synced_at", "last_sync_error", "breaker_detail")


@admin.register(Upstream)
class UpstreamAdmin(TenantScopedAdmin):
    form = UpstreamForm
    change_form_template = "admin/mcp_app/upstream/change_form.html"
    list_display = (
        "name",
        "tenant",
        "shown_url",
        "prefix",
        "entries",
        "last_synced_at",
        "sync_error",
        "breaker_state",
        "enabled",
    )
    list_filter = ("enabled", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("name", "prefix", "tenant__slug")
    readonly_fields = (*HEALTH_FIELDS, "imported_entries", "created_at", "updated_at")
    inlines = [UpstreamBindingInline]
    actions = ["sync_now", "test_connection", "close_breaker"]

    fieldsets = (
        (None, {"fields": ("tenant", "name", "url", "prefix", "enabled")}),
        ("Credentials", {"fields": CREDENTIAL_FIELDS}),
        ("Timing and protocol", {"fields": ("timeout_seconds", "sync_interval_seconds", "era")}),
        ("Changes after the first sync", {"fields": ("on_change",)}),
    )

    def get_fieldsets(self, request: HttpRequest, obj: Upstream | None = None) -> Any:
        if obj is None:
            return self.fieldsets
        return (
            *self.fieldsets,
            ("Health", {"fields": HEALTH_FIELDS}),
            ("Imported entries", {"fields": ("imported_entries",)}),
            ("History", {"fields": ("created_at", "updated_at")}),
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).with_entry_counts()  # type: ignore[attr-defined]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        request.sensitive_post_parameters = "__ALL__"  # type: ignore[attr-defined]  # error reports hide secrets
        return super().get_form(request, obj, change, **kwargs)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)  # evaluated once, and cached for the page
        states = breaker.states([row.pk for row in rows])
        for row in rows:
            row.breaker_state_value = states.get(row.pk)
        return changelist

    # -- columns and read-only fields ---------------------------------------------------------------------------
    @admin.display(description="URL")
    def shown_url(self, obj: Upstream) -> str:
        return display_url(obj.url)

    @admin.display(description="entries")
    def entries(self, obj: Upstream) -> int:
        counts = (getattr(obj, name, None) for name in ("tool_count", "resource_count", "prompt_count"))
        return sum(count or 0 for count in counts)

    @admin.display(description="sync error")
    def sync_error(self, obj: Upstream) -> str:
        return (obj.last_sync_error[:120] + ("…" if len(obj.last_sync_error) > 120 else "")) or "-"

    @admin.display(description="breaker")
    def breaker_state(self, obj: Upstream) -> str:
        state = getattr(obj, "breaker_state_value", None) or breaker.state(obj.pk)
        return str(state.status)

    @admin.display(description="circuit breaker")
    def breaker_detail(self, obj: Upstream) -> str:
        state = breaker.state(obj.pk)
        detail = f"{state.status}, {state.failures} recent failure(s)"
        if state.open_until is not None:
            detail += f", calls paused until {state.open_until:%Y-%m-%d %H:%M:%S %Z}"
        return detail

    @admin.display(description="server")
    def remote_server(self, obj: Upstream) -> str:
        info = obj.server_info or {}
        return " ".join(str(part) for part in (info.get("name"), info.get("version")) if part) or "-"

    @admin.display(description="entries imported by its syncs")
    def imported_entries(self, obj: Upstream) -> str:
        rows = []
        for model in (Tool, Resource, Prompt):
            kind = model._meta.model_name
            for entry in model._default_manager.filter(upstream=obj).order_by(model.key):  # by name, or by URI
                link = reverse(f"admin:mcp_app_{kind}_change", args=[entry.pk])
                rows.append((link, kind, getattr(entry, model.key), entry.remote_name or "-"))
        if not rows:
            return "None yet (sync to import)."
        return format_html(
            '<ul class="mcp-upstream-entries">{}</ul>',
            format_html_join(
                "", '<li><a href="{}">{} {}</a> <span class="text-base-500">(upstream: {})</span></li>', rows
            ),
        )

    # -- saving: bindings through the federation verbs, a first sync for new upstreams --------------------------
    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is not UpstreamBinding:
            super().save_formset(request, form, formset, change)
            return
        upstream = form.instance
        for binding in formset.save(commit=False):
            if binding.pk is None:
                for reason in bind(upstream, binding.server):
                    messages.warning(request, f"Skipped: {reason}")
        for binding in formset.deleted_objects:
            unbind(upstream, binding.server)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        if not change:
            _report_message(request, form.instance, sync_upstream(form.instance), "First sync")

    # -- buttons on the change page: (URL part, label, icon, what it does to the upstream) -----------------------
    buttons = (
        ("sync", "Sync now", "sync", lambda request, obj: _report_message(request, obj, sync_upstream(obj))),
        ("test", "Test connection", "lan", _probe_message),
        ("close-breaker", "Close breaker", "restart_alt", _close_breaker),
    )

    def get_urls(self) -> list[Any]:
        def button(name: str, run: Any) -> Any:
            def view(request: HttpRequest, object_id: str) -> HttpResponse:
                obj = self.get_object(request, object_id)  # 404 for another tenant's upstream
                if not permissions.can_change(request.user, obj):
                    raise PermissionDenied
                run(request, obj)
                return HttpResponseRedirect(reverse("admin:mcp_app_upstream_change", args=[obj.pk]))

            url_name = f"mcp_app_upstream_{name.replace('-', '_')}"
            return path(f"<path:object_id>/{name}/", self.admin_site.admin_view(require_POST(view)), name=url_name)

        return [*(button(name, run) for name, _, _, run in self.buttons), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        obj = self.get_object(request, object_id)
        buttons = []
        if permissions.can_change(request.user, obj):
            buttons = [
                (reverse(f"admin:mcp_app_upstream_{name.replace('-', '_')}", args=[obj.pk]), label, icon)
                for name, label, icon, _ in self.buttons
            ]
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "post_buttons": buttons})

    # -- list actions -------------------------------------------------------------------------------------------
    @admin.action(description="Sync selected upstreams now", permissions=["change"])
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Upstream]) -> None:
        for upstream in queryset:
            _report_message(request, upstream, sync_upstream(upstream))

    @admin.action(description="Test the connection of selected upstreams", permissions=["change"])
    def test_connection(self, request: HttpRequest, queryset: QuerySet[Upstream]) -> None:
        for upstream in queryset:
            _probe_message(request, upstream)

    @admin.action(description="Close the circuit breaker of selected upstreams", permissions=["change"])
    def close_breaker(self, request: HttpRequest, queryset: QuerySet[Upstream]) -> None:
        for upstream in queryset:
            breaker.reset(upstream.pk)
        self.message_user(request, f"Closed the circuit breaker of {len(queryset)} upstream(s).", messages.SUCCESS)
