""" "Try it" on a tool, resource or prompt: run it from the admin, as an agent of the same tenant.

The page (``<object id>/try/`` under the entry's admin) lets a member with the change role pick a server that
exposes the entry and one of the tenant's usable agent tokens, give JSON arguments, and see what a client would
see: the request sent, its notifications (progress, logs) and the result or error. The run goes through
``mcp_app.transport.console``, i.e. the token's grant on the server and the protocol dispatcher, like a request
on the wire; a token that may not use the server is refused with the wire's reason.

Viewers do not run anything (running a tool may have effects); another tenant's entry is a 404.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, cast

from asgiref.sync import async_to_sync
from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from .. import permissions
from ..models import AgentToken, McpServer, Prompt, Resource, ServerTool, Tool
from .base import PrettyJSONField


class TokenChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: AgentToken) -> str:
        label = f"{obj.agent.agent_id} — token {obj.prefix}…"
        return f"{label} ({obj.name})" if obj.name else label


class TryItForm(forms.Form):
    server = forms.ModelChoiceField(queryset=McpServer.objects.none(), help_text="A server exposing this entry.")
    token = TokenChoiceField(
        queryset=AgentToken.objects.none(),
        label="Agent",
        help_text="Run as this agent, with this token's server scope and grants.",
    )

    def __init__(self, *args: Any, servers: QuerySet[McpServer], tokens: QuerySet[AgentToken], **kwargs: Any):
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["server"]).queryset = servers
        cast(forms.ModelChoiceField, self.fields["token"]).queryset = tokens
        if servers.count() == 1:
            self.fields["server"].initial = servers.first()
        if tokens.count() == 1:
            self.fields["token"].initial = tokens.first()


class ArgumentsForm(TryItForm):
    arguments = PrettyJSONField(initial=dict, required=False, help_text="The arguments, as a JSON object.")

    def clean_arguments(self) -> Any:
        value = self.cleaned_data.get("arguments")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("Arguments are a JSON object.")
        return value


class ResourceForm(TryItForm):
    uri = forms.CharField(max_length=2000, help_text="The URI to read (for a template: with its variables filled).")


class TryItMixin:
    """Adds the "Try it" page and button to a catalog entry's ModelAdmin."""

    change_form_template: ClassVar[Any] = "admin/mcp_app/change_form_links.html"
    model: Any
    admin_site: Any

    def get_urls(self) -> list[Any]:
        opts = self.model._meta
        view = self.admin_site.admin_view(self.try_it_view)
        return [
            path("<path:object_id>/try/", view, name=f"{opts.app_label}_{opts.model_name}_try_it"),
            *super().get_urls(),  # type: ignore[misc]
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        links = list((extra_context or {}).get("object_links", []))
        obj = self.get_object(request, object_id)  # type: ignore[attr-defined]
        if permissions.can_change(request.user, obj):
            links.append((reverse(f"admin:mcp_app_{self.model._meta.model_name}_try_it", args=[obj.pk]), "Try it"))
        extra_context = {**(extra_context or {}), "object_links": links}
        return super().change_view(request, object_id, form_url, extra_context)  # type: ignore[misc]

    # -- what each kind of entry sends -------------------------------------------------------------------------
    def _servers(self, obj: Any) -> QuerySet[McpServer]:
        related = {
            Tool: "tool_bindings__tool",
            Resource: "resource_bindings__resource",
            Prompt: "prompt_bindings__prompt",
        }
        return McpServer.objects.filter(tenant_id=obj.tenant_id, **{related[type(obj)]: obj}).distinct()

    def _request(self, obj: Any, server: McpServer, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if isinstance(obj, Tool):
            binding = ServerTool.objects.select_related("tool").get(server=server, tool=obj)
            return "tools/call", {"name": binding.exposed_name, "arguments": data["arguments"]}
        if isinstance(obj, Resource):
            return "resources/read", {"uri": data["uri"]}
        return "prompts/get", {"name": obj.name, "arguments": data["arguments"]}

    # -- the page ------------------------------------------------------------------------------------------------
    def try_it_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        from ..transport.console import run_as

        obj = self.get_object(request, object_id)  # type: ignore[attr-defined]  # a ModelAdmin mixin; 404 across tenants
        if not permissions.can_change(request.user, obj):
            raise PermissionDenied
        servers = permissions.scope_queryset(request.user, self._servers(obj), permissions.ADMIN)
        tokens = permissions.scope_queryset(
            request.user,
            AgentToken.objects.usable()
            .filter(agent__tenant_id=obj.tenant_id, agent__is_active=True)
            .select_related("agent"),
            permissions.ADMIN,
        ).order_by("agent__agent_id", "-created_at")
        form_class = ResourceForm if isinstance(obj, Resource) else ArgumentsForm
        initial: dict[str, Any] = {"uri": obj.uri} if isinstance(obj, Resource) else {"arguments": {}}
        form = form_class(request.POST or None, initial=initial, servers=servers, tokens=tokens)
        run = None
        if request.method == "POST" and form.is_valid():
            method, params = self._request(obj, form.cleaned_data["server"], form.cleaned_data)
            run = async_to_sync(run_as)(form.cleaned_data["token"], form.cleaned_data["server"], method, params)
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": f"Try {obj}",
            "opts": opts,
            "original": obj,
            "form": form,
            "run": run,
            "pretty": _pretty_run(run) if run is not None else None,
            "change_url": reverse(f"admin:mcp_app_{opts.model_name}_change", args=[obj.pk]),
            "no_servers": not servers.exists(),
            "no_tokens": not tokens.exists(),
        }
        return TemplateResponse(request, "admin/mcp_app/try_it.html", context)


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _pretty_run(run: Any) -> dict[str, Any]:
    progress = [n["params"] for n in run.notifications if n.get("method") == "notifications/progress"]
    others = [n for n in run.notifications if n.get("method") != "notifications/progress"]
    return {
        "request": _dump(run.request),
        "progress": progress,
        "notifications": [_dump(n) for n in others],
        "result": _dump(run.result) if run.result is not None else None,
        "error": run.error,
        "error_json": _dump(run.error) if run.error is not None else None,
        "is_error_result": isinstance(run.result, dict) and bool(run.result.get("isError")),
    }
