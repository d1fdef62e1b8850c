""" "Try it" on a tool, resource or prompt (``<object id>/try/``, change role): run it as one of the tenant's agent
tokens through ``mcp_app.transport.console``, like a request on the wire; ``_stream=1`` answers NDJSON, one line
per notification, then the outcome. Design: docs/admin.md ("Try it").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar, cast

from asgiref.sync import async_to_sync, sync_to_async
from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from unfold.widgets import UnfoldAdminSelectWidget, UnfoldAdminTextInputWidget

from .. import permissions
from ..models import AgentToken, McpServer, Prompt, Resource, ServerTool, Tool
from .base import PrettyJSONField
from .schema_form import ARG_PREFIX, arguments_from, effective_input_schema, schema_fields


class TokenChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: AgentToken) -> str:
        label = f"{obj.agent.agent_id} — token {obj.prefix}…"
        return f"{label} ({obj.name})" if obj.name else label


class TryItForm(forms.Form):
    server = forms.ModelChoiceField(
        queryset=McpServer.objects.none(), help_text="A server exposing this entry.", widget=UnfoldAdminSelectWidget
    )
    token = TokenChoiceField(
        queryset=AgentToken.objects.none(),
        widget=UnfoldAdminSelectWidget,
        label="Agent",
        help_text="Run as this agent, with this token's server scope and grants.",
    )

    def __init__(
        self,
        *args: Any,
        servers: QuerySet[McpServer],
        tokens: QuerySet[AgentToken],
        server: McpServer | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["server"]).queryset = servers
        cast(forms.ModelChoiceField, self.fields["token"]).queryset = tokens
        # Preselected: the server asked for (one of the choices), else the first; the first usable token.
        self.fields["server"].initial = server or servers.first()
        self.fields["token"].initial = tokens.first()


class ArgumentsForm(TryItForm):
    input_mode = forms.ChoiceField(
        choices=[("form", "Form"), ("json", "JSON")], initial="form", required=False, widget=forms.RadioSelect
    )
    arguments = PrettyJSONField(initial=dict, required=False, help_text="The arguments, as a JSON object.")

    def __init__(self, *args: Any, schema: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema or {}
        self.fields.update(schema_fields(self.schema))
        if not any(name.startswith(ARG_PREFIX) for name in self.fields):
            self.fields["input_mode"].initial = "json"
        if self.is_bound and "input_mode" not in self.data:
            # A post without the mode (a script, an older page): raw JSON when it carries "arguments".
            data = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict
            data["input_mode"] = "json" if "arguments" in data else "form"
            self.data = data

    def clean_arguments(self) -> Any:
        value = self.cleaned_data.get("arguments")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("Arguments are a JSON object.")
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("input_mode") == "form":
            arguments, errors = arguments_from(self.schema, cleaned)
            for name, message in errors.items():
                self.add_error(name, message)
            cleaned["arguments"] = arguments
        return cleaned

    def schema_field_names(self) -> list[str]:
        return [name for name in self.fields if name.startswith(ARG_PREFIX)]


class ResourceForm(TryItForm):
    uri = forms.CharField(
        max_length=2000,
        widget=UnfoldAdminTextInputWidget,
        help_text="The URI to read (for a template: with its variables filled).",
    )


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
        kind = obj._meta.model_name  # the server's bindings of it: ``tool_bindings__tool``, …
        return McpServer.objects.filter(tenant_id=obj.tenant_id, **{f"{kind}_bindings__{kind}": obj}).distinct()

    def _request(self, obj: Any, server: McpServer, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if isinstance(obj, Tool):
            binding = ServerTool.objects.select_related("tool").get(server=server, tool=obj)
            return "tools/call", {"name": binding.exposed_name, "arguments": data["arguments"]}
        if isinstance(obj, Resource):
            return "resources/read", {"uri": data["uri"]}
        return "prompts/get", {"name": obj.name, "arguments": data["arguments"]}

    # -- the page ------------------------------------------------------------------------------------------------
    def try_it_view(self, request: HttpRequest, object_id: str) -> HttpResponseBase:
        from ..transport.console import run_as

        obj = self.get_object(request, object_id)  # type: ignore[attr-defined]  # a ModelAdmin mixin; 404 across tenants
        if not permissions.can_change(request.user, obj):
            raise PermissionDenied
        servers = permissions.scope_queryset(request.user, self._servers(obj), permissions.ADMIN).order_by("server_id")
        usable = AgentToken.objects.usable().filter(agent__tenant_id=obj.tenant_id, agent__is_active=True)
        tokens = permissions.scope_queryset(request.user, usable.select_related("agent"), permissions.ADMIN)
        tokens = tokens.order_by("agent__agent_id", "-created_at")
        requested = request.GET.get("server", "")
        server = servers.filter(pk=int(requested)).first() if requested.isdigit() else None
        data = request.POST if request.method == "POST" else None
        choices: dict[str, Any] = {"servers": servers, "tokens": tokens, "server": server}
        if isinstance(obj, Resource):
            form: TryItForm = ResourceForm(data, initial={"uri": obj.uri}, **choices)
        else:
            schema = effective_input_schema(obj) if isinstance(obj, Tool) else _prompt_schema(obj)
            form = ArgumentsForm(data, initial={"arguments": {}}, schema=schema, **choices)
        run = None
        if request.method == "POST" and form.is_valid():
            method, params = self._request(obj, form.cleaned_data["server"], form.cleaned_data)
            token, chosen = form.cleaned_data["token"], form.cleaned_data["server"]
            if request.POST.get("_stream"):
                return StreamingHttpResponse(_stream(token, chosen, method, params), content_type=NDJSON)
            run = async_to_sync(run_as)(token, chosen, method, params)
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
            "media": form.media,
        }
        return TemplateResponse(request, "admin/mcp_app/try_it.html", context)


NDJSON = "application/x-ndjson"


def _line(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, default=str).encode() + b"\n"


async def _stream(token: AgentToken, server: McpServer, method: str, params: dict[str, Any]) -> AsyncIterator[bytes]:
    """The run as NDJSON: ``{"type": "notification", "message": …}`` per notification as it happens, then
    ``{"type": "outcome", "html": …}`` (the same outcome the page shows). A client that goes away cancels it."""
    from ..transport.console import run_as

    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def heard(message: dict[str, Any]) -> None:
        await queue.put(message)

    work = asyncio.ensure_future(run_as(token, server, method, params, on_notification=heard))
    try:
        yield _line({"type": "started", "request": json.loads(_dump({"method": method, "params": params}))})
        while not (work.done() and queue.empty()):
            getter = asyncio.ensure_future(queue.get())
            done, _pending = await asyncio.wait({getter, work}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield _line({"type": "notification", "message": getter.result()})
            else:
                getter.cancel()
        run = work.result()
        html = await sync_to_async(render_to_string)(
            "admin/mcp_app/try_it_outcome.html", {"run": run, "pretty": _pretty_run(run)}
        )
        yield _line({"type": "outcome", "html": html})
    finally:
        if not work.done():
            work.cancel()


def _prompt_schema(prompt: Prompt) -> dict[str, Any]:
    """A prompt's arguments as an object schema of strings (prompt arguments are strings)."""
    arguments = [a for a in prompt.arguments or () if isinstance(a, dict) and isinstance(a.get("name"), str)]
    return {
        "type": "object",
        "properties": {a["name"]: {"type": "string", "description": a.get("description", "")} for a in arguments},
        "required": [a["name"] for a in arguments if a.get("required")],
    }


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
