"""Resolution of a server's effective catalog from the database and the code registry.

``resolve_catalog(server, grant=...)`` returns the ``ServerCatalog`` of the server's current ``catalog_version``
as one token's grant sees it, cached per process by version (read from the server snapshot: no query). Python
tools no longer registered, or not allowed for the tenant, are left out (and logged). ``build_draft`` is what the
rows describe; ``build_catalog`` what the server serves: its published catalog version's definitions over the
draft's targets (``catalog.versions``), or the draft while none is published.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.db.models import QuerySet

from ..conf import mcp_settings, on_reload
from ..definitions.patterns import UriTemplate
from ..definitions.registry import registry
from ..definitions.static import StaticBehaviour
from ..definitions.targets import HttpTarget, StaticPromptTarget, StaticResourceTarget
from ..definitions.upstreams import UpstreamPromptTarget, UpstreamResourceTarget, UpstreamToolTarget, endpoint_of
from ..models import (
    CatalogChange,
    McpServer,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    Tool,
    Upstream,
)
from ..models.agents import CatalogGrant
from ..models.tenancy import python_tool_allowed
from ..models.versions import KEY_FIELDS
from ..observability import metrics
from ..protocol.descriptors import PromptArgument, PromptDescriptor, ResourceDescriptor, ServerCatalog, ToolDescriptor
from .grants import CatalogLru, granted_catalog, views

logger = logging.getLogger("mcp_app.catalog")

_cache = CatalogLru()


def _upstream_of(entry: Tool | Resource | Prompt, server_id: int) -> Upstream | None:
    """The enabled upstream of an upstream entry of ``server_id``'s tenant (else ``None``, logged)."""
    upstream = entry.upstream
    if upstream is None or upstream.tenant_id != entry.tenant_id:
        logger.warning("server %s binds upstream entry %s without its upstream", server_id, entry.pk)
        return None
    return upstream if upstream.enabled else None


def approval_follows_hint(tool: Tool) -> bool:
    """Whether ``tool``'s approval follows its ``destructiveHint``: an upstream tool without a setting of its own,
    while ``APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS`` is on (docs/approvals.md)."""
    return (
        tool.requires_approval is None
        and tool.kind == Tool.Kind.UPSTREAM
        and bool(mcp_settings.APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS)
    )


def is_destructive(annotations: Any) -> bool:
    return isinstance(annotations, dict) and annotations.get("destructiveHint") is True


def requires_approval(tool: Tool) -> bool:
    """Whether calls of ``tool`` wait for a tenant admin's approval: its own setting, else whether it says it is
    destructive, when its approval follows that hint (``approval_follows_hint``)."""
    if tool.requires_approval is not None:
        return bool(tool.requires_approval)
    return approval_follows_hint(tool) and is_destructive(tool.annotations)


# Each kind of entry, as one function per kind in one table: how a row becomes a descriptor (``None``: left out,
# logged). The target it carries is run by the executor registered for its type (``runtime.executors``).


def _python_tool(binding: ServerTool, allowed_python_tools: Any) -> ToolDescriptor | None:
    tool = binding.tool
    if not python_tool_allowed(allowed_python_tools, tool.python_name or tool.name):
        # The row may exist (bound before the operator withdrew the tool): never expose it.
        logger.warning("server %s binds python tool %r not allowed for its tenant", binding.server_id, tool.python_name)
        return None
    registered = registry.get(tool.python_name or tool.name)
    if registered is None:
        logger.warning("server %s binds unregistered python tool %r", binding.server_id, tool.python_name)
        return None
    return ToolDescriptor(
        name=binding.name_override or tool.name,
        title=tool.title or registered.title,
        description=binding.description_override or tool.description or registered.description or None,
        input_schema=registered.input_schema,
        output_schema=registered.output_schema,
        annotations=tool.annotations or registered.annotations,
        icons=tool.icons,
        task_support=registered.task_support,
        execution=binding.execution or registered.execution,
        timeout=float(binding.timeout_seconds) if binding.timeout_seconds else registered.timeout,
        target=registered,
        ref=tool.pk,
        rate_limit=(tool.rate_limit, tool.rate_burst),
        price=tool.price,
        requires_approval=requires_approval(tool),
        approval_follows_hint=approval_follows_hint(tool),
    )


def _row_tool(binding: ServerTool, target: object | None) -> ToolDescriptor | None:
    """A tenant-written or imported tool (static, http, upstream): everything the client sees comes from the row."""
    tool = binding.tool
    if target is None:
        return None
    return ToolDescriptor(
        name=binding.name_override or tool.name,
        title=tool.title or None,
        description=binding.description_override or tool.description or None,
        input_schema=tool.input_schema or {"type": "object", "properties": {}},
        output_schema=tool.output_schema,
        annotations=tool.annotations,
        icons=tool.icons,
        task_support=tool.task_support,
        execution=binding.execution or "inline",
        timeout=float(binding.timeout_seconds) if binding.timeout_seconds else None,
        target=target,
        ref=tool.pk,
        rate_limit=(tool.rate_limit, tool.rate_burst),
        price=tool.price,
        requires_approval=requires_approval(tool),
        approval_follows_hint=approval_follows_hint(tool),
    )


def _static_tool(binding: ServerTool, _allowed: Any) -> ToolDescriptor | None:
    tool = binding.tool
    behaviour = StaticBehaviour(
        result=tool.static_result,
        error=tool.static_error,
        cases=tuple(tool.static_cases or ()),
        delay_ms=tool.static_delay_ms,
        progress_steps=tool.static_progress_steps,
    )
    return _row_tool(binding, behaviour)


def _http_tool(binding: ServerTool, _allowed: Any) -> ToolDescriptor | None:
    tool = binding.tool
    webhook = getattr(tool, "webhook", None)  # a missing reverse one-to-one raises; getattr's default catches it
    if webhook is None:
        logger.warning("server %s binds http tool %r, which has no webhook", binding.server_id, tool.name)
        return None
    headers = tuple((str(key), str(value)) for key, value in (webhook.headers or {}).items())
    return _row_tool(
        binding,
        HttpTarget(
            url=webhook.url,
            method=webhook.method,
            headers=headers,
            timeout_seconds=webhook.timeout_seconds,
            secret_headers=webhook.secret_headers_encrypted,
        ),
    )


def _upstream_tool(binding: ServerTool, _allowed: Any) -> ToolDescriptor | None:
    upstream = _upstream_of(binding.tool, binding.server_id)
    return _row_tool(binding, upstream and UpstreamToolTarget(endpoint_of(upstream), binding.tool.remote_name))


_TOOL_KINDS: dict[str, Callable[[ServerTool, Any], ToolDescriptor | None]] = {
    Tool.Kind.PYTHON: _python_tool,
    Tool.Kind.STATIC: _static_tool,
    Tool.Kind.HTTP: _http_tool,
    Tool.Kind.UPSTREAM: _upstream_tool,
}


def _python_resource(resource: Resource, _server_id: int) -> object | None:
    registered = registry.resource(resource.python_name)
    if registered is None:
        logger.warning("resource %s binds unregistered function %r", resource.uri, resource.python_name)
    return registered


def _upstream_resource(resource: Resource, server_id: int) -> object | None:
    upstream = _upstream_of(resource, server_id)
    return upstream and UpstreamResourceTarget(endpoint_of(upstream))


_RESOURCE_TARGETS: dict[str, Callable[[Resource, int], object | None]] = {
    Resource.Kind.PYTHON: _python_resource,
    Resource.Kind.STATIC: lambda resource, _server_id: StaticResourceTarget(text=resource.text, blob=resource.blob),
    Resource.Kind.UPSTREAM: _upstream_resource,
}


def _resource_descriptor(resource: Resource, server_id: int) -> ResourceDescriptor | None:
    target = _RESOURCE_TARGETS[resource.kind](resource, server_id)
    if target is None:
        return None
    return ResourceDescriptor(
        uri=resource.uri,
        name=resource.name,
        is_template=resource.is_template,
        title=resource.title or None,
        description=resource.description or None,
        mime_type=resource.mime_type or None,
        annotations=resource.annotations,
        pattern=UriTemplate(resource.uri) if resource.is_template else None,
        target=target,
        ref=resource.pk,
    )


def _row_prompt(prompt: Prompt, target: object | None, **defaults: Any) -> PromptDescriptor | None:
    """A prompt as its row describes it; ``defaults``: what a registered function says where the row is empty."""
    if target is None:
        return None
    arguments = tuple(
        PromptArgument(
            name=argument["name"],
            description=argument.get("description") or None,
            required=bool(argument.get("required", False)),
            completions=tuple(argument.get("completions") or ()),
        )
        for argument in prompt.arguments or ()
    )
    return PromptDescriptor(
        name=prompt.name,
        arguments=arguments or defaults.get("arguments", ()),
        title=prompt.title or defaults.get("title"),
        description=prompt.description or defaults.get("description") or None,
        target=target,
        ref=prompt.pk,
    )


def _python_prompt(prompt: Prompt, _server_id: int) -> PromptDescriptor | None:
    registered = registry.prompt(prompt.python_name or prompt.name)
    if registered is None:
        logger.warning("prompt %s binds unregistered function %r", prompt.name, prompt.python_name)
        return None
    return _row_prompt(
        prompt,
        registered,
        arguments=tuple(
            PromptArgument(name=name, description=description or None, required=required)
            for name, description, required in registered.parameters
        ),
        title=registered.title,
        description=registered.description,
    )


def _upstream_prompt(prompt: Prompt, server_id: int) -> PromptDescriptor | None:
    upstream = _upstream_of(prompt, server_id)
    return _row_prompt(prompt, upstream and UpstreamPromptTarget(endpoint_of(upstream), prompt.remote_name))


_PROMPT_KINDS: dict[str, Callable[[Prompt, int], PromptDescriptor | None]] = {
    Prompt.Kind.PYTHON: _python_prompt,
    Prompt.Kind.STATIC: lambda prompt, _server_id: _row_prompt(
        prompt, StaticPromptTarget(tuple(prompt.messages or ()))
    ),
    Prompt.Kind.UPSTREAM: _upstream_prompt,
}


def build_catalog(server: McpServer | Any) -> ServerCatalog:
    """The catalog ``server`` serves (an ``McpServer`` or a cached ``ServerEntry``: its pk and tenant_id count):
    its published version's entries, each with its live row's target; its draft while none is published."""
    draft = build_draft(server)
    entries = McpServer.objects.filter(pk=server.pk).values_list("published_version__entries", flat=True).first()
    if entries is None:
        return draft
    # An upstream that blocks its changes: the entries it changed stop being served until the change is approved.
    blocked: set[tuple[str, Any]] = set()
    for list_name, key, ref in (
        CatalogChange.objects.pending()
        .filter(server_id=server.pk, upstream__on_change=Upstream.OnChange.BLOCK)
        .values_list("list_name", "key", "ref")
    ):
        # By its name and by its row: a change may also rename the entry (a new prefix), so its key differs.
        blocked.add((list_name, key))
        if ref is not None:
            blocked.add((list_name, ref))
    return _published(server.pk, draft, entries, blocked)


# How a version's wire definition replaces the live descriptor's: one function per list. The target, the row's
# runtime settings (execution, timeout, rate limit, price) and what the wire does not show stay the live ones.


def _published_tool(live: ToolDescriptor, definition: dict[str, Any]) -> ToolDescriptor:
    # A tool whose approval follows its hint requires it while either the published or the live definition says
    # it is destructive: an upstream that drops its hint after review does not lift the approval while the change
    # is held, and one that adds it is believed at once.
    follows = live.approval_follows_hint and is_destructive(definition.get("annotations"))
    return replace(
        live,
        requires_approval=live.requires_approval or follows,
        name=definition["name"],
        title=definition.get("title"),
        description=definition.get("description"),
        input_schema=definition.get("inputSchema") or {"type": "object", "properties": {}},
        output_schema=definition.get("outputSchema"),
        annotations=definition.get("annotations"),
        icons=definition.get("icons"),
    )


def _published_resource(live: ResourceDescriptor, definition: dict[str, Any]) -> ResourceDescriptor:
    uri = definition.get("uriTemplate") if live.is_template else definition.get("uri")
    uri = uri or live.uri
    return replace(
        live,
        uri=uri,
        name=definition.get("name", live.name),
        title=definition.get("title"),
        description=definition.get("description"),
        mime_type=definition.get("mimeType"),
        annotations=definition.get("annotations"),
        pattern=UriTemplate(uri) if live.is_template else None,
    )


def _published_prompt(live: PromptDescriptor, definition: dict[str, Any]) -> PromptDescriptor:
    arguments = tuple(
        PromptArgument(
            name=argument["name"],
            description=argument.get("description") or None,
            required=bool(argument.get("required", False)),
            completions=live_argument.completions if (live_argument := live.argument(argument["name"])) else (),
        )
        for argument in definition.get("arguments") or ()
    )
    return replace(
        live,
        name=definition["name"],
        title=definition.get("title"),
        description=definition.get("description"),
        arguments=arguments,
    )


_PUBLISHED: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "tools": _published_tool,
    "resources": _published_resource,
    "resourceTemplates": _published_resource,
    "prompts": _published_prompt,
}


def _published(
    server_pk: int, draft: ServerCatalog, entries: list[dict[str, Any]], blocked: set[tuple[str, Any]]
) -> ServerCatalog:
    """The version's ``entries``, in its order, each served by the draft's descriptor of the same row."""
    live: dict[tuple[str, int | None], Any] = {
        **{("tools", d.ref): d for d in draft.tools},
        **{("resources", d.ref): d for d in draft.resources},
        **{("resourceTemplates", d.ref): d for d in draft.templates},
        **{("prompts", d.ref): d for d in draft.prompts},
    }
    served: dict[str, list[Any]] = {name: [] for name in _PUBLISHED}
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        list_name, definition = entry["list"], entry["definition"]
        key = (list_name, str(definition.get(KEY_FIELDS[list_name], "")))
        if key in blocked or (list_name, entry.get("ref")) in blocked or key in seen:
            continue
        descriptor = live.get((list_name, entry.get("ref")))
        if descriptor is None:
            logger.warning("server %s publishes %s %r, whose row is gone or disabled", server_pk, *key)
            continue
        seen.add(key)
        served[list_name].append(_PUBLISHED[list_name](descriptor, definition))
    return ServerCatalog(
        tools=tuple(served["tools"]),
        resources=tuple(served["resources"]),
        templates=tuple(served["resourceTemplates"]),
        prompts=tuple(served["prompts"]),
    )


def build_draft(server: McpServer | Any) -> ServerCatalog:
    """What ``server``'s rows describe now (its draft): every enabled binding, in the server's order."""
    tenant = server.tenant_id
    tools = ServerTool.objects.filter(server_id=server.pk, enabled=True, tool__tenant_id=tenant).select_related(
        "tool", "tool__webhook", "tool__upstream"
    )
    resources = ServerResource.objects.filter(
        server_id=server.pk, enabled=True, resource__tenant_id=tenant
    ).select_related("resource", "resource__upstream")
    prompts = ServerPrompt.objects.filter(server_id=server.pk, enabled=True, prompt__tenant_id=tenant).select_related(
        "prompt", "prompt__upstream"
    )
    allowed = Tenant.objects.filter(pk=tenant).values_list("allowed_python_tools", flat=True).first()
    tool_descriptors = _resolved(tools, lambda binding: _TOOL_KINDS[binding.tool.kind](binding, allowed))
    resource_descriptors = _resolved(resources, lambda binding: _resource_descriptor(binding.resource, server.pk))
    return ServerCatalog(
        tools=tool_descriptors,
        resources=tuple(d for d in resource_descriptors if not d.is_template),
        templates=tuple(d for d in resource_descriptors if d.is_template),
        prompts=_resolved(prompts, lambda binding: _PROMPT_KINDS[binding.prompt.kind](binding.prompt, server.pk)),
    )


def _resolved(bindings: QuerySet[Any], describe: Callable[[Any], Any]) -> tuple[Any, ...]:
    """What ``describe`` makes of each binding, in the server's order, but those it leaves out (``None``)."""
    return tuple(found for found in map(describe, bindings.order_by("position", "id")) if found is not None)


def resolve_catalog(server: McpServer | Any, *, grant: CatalogGrant | None = None, load: bool = True) -> ServerCatalog:
    """The catalog ``server`` exposes to a token with ``grant`` (``None``: everything). ``load=False`` raises
    ``CacheMiss`` instead of building a catalog that is not cached (the request path then retries in a worker
    thread)."""
    # created_at guards against a primary key reused after deletion (possible on some databases).
    key = (server.pk, server.catalog_version, server.created_at)
    catalog = _cache.get(key)
    metrics.record_cache("catalog", catalog is not None)
    if catalog is None:
        if not load:
            from ..caching.identity import CacheMiss

            raise CacheMiss("catalogs")
        catalog = build_catalog(server)
        _cache.put(key, catalog)
    if grant is None or grant.is_full:
        return catalog
    return granted_catalog(server, catalog, grant)


@on_reload  # resolution reads a setting (APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS)
def clear_cache() -> None:
    _cache.clear()
    views.clear()
