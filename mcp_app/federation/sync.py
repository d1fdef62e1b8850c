"""Catalog sync: an upstream's tools, resources, resource templates and prompts imported under its prefix.

``sync_upstream(upstream)`` (sync code: the API, the admin, ``mcp_upstream``, Celery beat's ``sync_upstreams``)
reads the upstream's lists over a fresh connection (``fetch``) and writes them in one transaction (``apply``):

- an entry is created for each upstream entry (tools and prompts named ``prefix + name``; resources keep their
  URI and take the prefix on their name), updated where it changed, deleted where the upstream dropped it (its
  bindings go with it, on every server);
- every server the upstream is bound to as a whole (``UpstreamBinding``) exposes every entry, new ones included;
- a name already taken in the tenant's catalog by another entry, an invalid name or schema, more than
  ``UPSTREAM_MAX_ENTRIES`` of a kind, an entry larger than ``UPSTREAM_MAX_ENTRY_BYTES`` or what passes
  ``UPSTREAM_MAX_CATALOG_BYTES`` (every process holds the catalog) is not imported and is reported
  (``SyncReport.skipped``); reading stops at that bound too;
- imported text (titles, descriptions, names) loses ANSI escapes, control, zero-width and bidi-override
  characters, descriptions are cut at ``UPSTREAM_MAX_DESCRIPTION_CHARS``, and each such entry is reported under
  ``SyncReport.flagged``, as is one whose text holds a tag posing as a role marker (``<system>``): kept, flagged;
- what changed bumps the servers' catalog versions like any edit (``catalog.signals``), so connected clients
  get ``list_changed``; a sync that changes nothing writes no entry and bumps nothing.

The upstream's ``list_changed`` notifications, heard on a pooled connection, start a sync in the serving
process (``changed``; one at a time per upstream, a change during a sync runs one more). A failed sync keeps
the catalog as it was and records why (``Upstream.last_sync_error``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from ..conf import mcp_settings
from ..definitions.prompts import validate_uri_template
from ..definitions.upstreams import UpstreamEndpoint, clean_text, has_fake_tag, prefixed
from .connection import UpstreamForbidden, UpstreamUnavailable, open_client, unreachable

logger = logging.getLogger("mcp_app.federation")


@dataclass
class RemoteCatalog:
    protocol_version: str
    server_info: dict[str, Any] | None
    capabilities: dict[str, Any]
    tools: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)  # kinds cut short by UPSTREAM_MAX_CATALOG_BYTES


@dataclass
class SyncReport:
    """What a sync did: names added, updated and removed, entries skipped (with why), entries imported with
    their text cleaned or holding a suspicious tag (``flagged``, with why), or the error."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "error": self.error,
            "added": self.added,
            "updated": self.updated,
            "removed": self.removed,
            "skipped": self.skipped,
            "flagged": self.flagged,
        }


# Reading ---------------------------------------------------------------------------------------------------------


@dataclass
class _Budget:
    """The bytes of catalog one sync may still read (``UPSTREAM_MAX_CATALOG_BYTES``, descriptions cut first)."""

    left: int


async def _all(fetch: Any, attribute: str, limit: int, budget: _Budget) -> tuple[list[dict[str, Any]], str]:
    """Every page of a list (``fetch(cursor)``), as wire dicts, at most ``limit`` items and ``budget`` bytes;
    with why it stopped short (``"count"``, ``"bytes"``) or ``""``."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    description_limit = int(mcp_settings.UPSTREAM_MAX_DESCRIPTION_CHARS)
    for _page in range(1000):
        page = await fetch(cursor)
        for model in getattr(page, attribute):
            if len(items) >= limit:
                return items, "count"
            item = model.model_dump(by_alias=True, mode="json", exclude_none=True)
            if isinstance(item.get("description"), str) and len(item["description"]) > description_limit:
                item["description"] = item["description"][: description_limit + 1]  # one more: apply flags it
            budget.left -= len(orjson.dumps(item))
            if budget.left < 0:
                return items, "bytes"
            items.append(item)
        cursor = page.next_cursor
        del page  # the page's models may be large: not held while the next one is read
        if not cursor:
            break
    return items, ""


async def fetch(endpoint: UpstreamEndpoint) -> RemoteCatalog:
    """The upstream's catalog, read over a connection of its own. Raises ``UpstreamUnavailable``, ``TimeoutError``
    (``UPSTREAM_DEFAULT_TIMEOUT_SECONDS`` for the whole read) or the SDK's errors."""
    limit = int(mcp_settings.UPSTREAM_MAX_ENTRIES)
    budget = _Budget(int(mcp_settings.UPSTREAM_MAX_CATALOG_BYTES))
    async with asyncio.timeout(float(mcp_settings.UPSTREAM_DEFAULT_TIMEOUT_SECONDS)):
        async with open_client(endpoint) as client:
            capabilities = client.server_capabilities
            info = client.server_info
            remote = RemoteCatalog(
                protocol_version=client.protocol_version,
                server_info=info.model_dump(by_alias=True, mode="json", exclude_none=True) if info else None,
                capabilities=capabilities.model_dump(by_alias=True, mode="json", exclude_none=True),
            )
            session = client.session
            lists: list[tuple[str, Any, str, Any]] = []
            if capabilities.tools is not None:
                lists.append(("tools", session.list_tools, "tools", None))
            if capabilities.resources is not None:
                lists.append(("resources", session.list_resources, "resources", None))
                lists.append(("templates", session.list_resource_templates, "resource_templates", None))
            if capabilities.prompts is not None:
                lists.append(("prompts", session.list_prompts, "prompts", None))
            from mcp_types import PaginatedRequestParams

            for kind, method, attribute, _unused in lists:

                async def page(cursor: str | None, method: Any = method) -> Any:
                    return await method(params=PaginatedRequestParams(cursor=cursor) if cursor else None)

                items, stopped = await _all(page, attribute, limit, budget)
                setattr(remote, kind, items)
                if stopped == "count":
                    remote.truncated.append(kind)
                elif stopped == "bytes":
                    remote.over_budget.append(kind)
                    break  # nothing more fits
            return remote


# Writing ---------------------------------------------------------------------------------------------------------


class _Text:
    """Imported text made safe to show an agent or an operator, noting what was done to it (``flags``)."""

    def __init__(self) -> None:
        self.flags: list[str] = []

    def __call__(self, value: Any, limit: int | None = None) -> str:
        text, cleaned = clean_text(str(value or ""))
        if cleaned:
            self._flag("control, zero-width or bidi-override characters removed")
        if has_fake_tag(text):
            self._flag("holds a tag posing as a role marker (<system>, <|im_start|>, ...)")
        limit = int(mcp_settings.UPSTREAM_MAX_DESCRIPTION_CHARS) if limit is None else limit
        if len(text) > limit:
            self._flag(f"text cut at {limit} characters")
            text = text[:limit]
        return text

    def _flag(self, why: str) -> None:
        if why not in self.flags:
            self.flags.append(why)


def _tool_fields(remote: dict[str, Any], text: _Text) -> dict[str, Any]:
    execution = remote.get("execution") if isinstance(remote.get("execution"), dict) else {}
    task_support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return {
        "title": text(remote.get("title") or (remote.get("annotations") or {}).get("title"), 200),
        "description": text(remote.get("description")),
        "input_schema": remote.get("inputSchema") or {"type": "object"},
        "output_schema": remote.get("outputSchema"),
        "annotations": remote.get("annotations"),
        "icons": remote.get("icons"),
        # A proxied call never becomes a task upstream; here it may, like any tool, when the upstream says so.
        "task_support": task_support if task_support in ("optional", "required") else "forbidden",
    }


def _resource_fields(remote: dict[str, Any], prefix: str, template: bool, text: _Text) -> dict[str, Any]:
    return {
        "name": prefixed(prefix, text(remote.get("name"), 200))[:200],
        "remote_name": str(remote.get("name") or "")[:200],
        "title": text(remote.get("title"), 200),
        "description": text(remote.get("description")),
        "mime_type": text(remote.get("mimeType"), 200),
        "annotations": remote.get("annotations"),
        "is_template": template,
    }


def _prompt_fields(remote: dict[str, Any], text: _Text) -> dict[str, Any]:
    arguments = [
        {
            "name": text(argument.get("name"), 200),
            **({"description": text(argument["description"])} if argument.get("description") else {}),
            "required": bool(argument.get("required", False)),
        }
        for argument in remote.get("arguments") or ()
        if isinstance(argument, dict) and argument.get("name")
    ]
    return {
        "title": text(remote.get("title"), 200),
        "description": text(remote.get("description")),
        "arguments": arguments,
    }


def _template_problem(uri: str) -> str | None:
    """Why a template is refused as a tenant's would be (``validate_uri_template``), else ``None``."""
    try:
        validate_uri_template(uri)
    except ValueError as exc:
        return str(exc)
    return None


def _admitted(report: SyncReport, what: str, fields: dict[str, Any], text: _Text) -> bool:
    """Whether the entry's stored fields fit ``UPSTREAM_MAX_ENTRY_BYTES`` (else skipped); notes its flags."""
    limit = int(mcp_settings.UPSTREAM_MAX_ENTRY_BYTES)
    size = len(orjson.dumps(fields))
    if size > limit:
        report.skipped.append(f"{what}: {size} bytes, more than the {limit} an entry may have")
        return False
    report.flagged.extend(f"{what}: {why}" for why in text.flags)
    return True


def _changed(entry: Any, fields: dict[str, Any]) -> bool:
    return any(getattr(entry, name) != value for name, value in fields.items())


def apply(upstream: Any, remote: RemoteCatalog) -> SyncReport:
    """Write ``remote`` as ``upstream``'s entries (one transaction), bind them where the upstream is bound whole."""
    from ..models import Prompt, Resource, Tool, Upstream
    from ..models.catalog import validate_object_schema, validate_tool_name

    report = SyncReport()
    report.skipped.extend(
        f"{kind}: more than {mcp_settings.UPSTREAM_MAX_ENTRIES} on the upstream; the rest was not imported"
        for kind in remote.truncated
    )
    report.skipped.extend(
        f"{kind} and what follows: the upstream's catalog passed {mcp_settings.UPSTREAM_MAX_CATALOG_BYTES} bytes; "
        "the rest was not imported"
        for kind in remote.over_budget
    )
    prefix = upstream.prefix
    with transaction.atomic():
        # One sync of an upstream at a time across processes (every process that heard its list_changed syncs
        # it): the row lock makes the later ones find the entries the first wrote, and change nothing.
        Upstream.objects.select_for_update().filter(pk=upstream.pk).first()
        # Tools.
        existing = {tool.remote_name: tool for tool in Tool.objects.filter(upstream=upstream)}
        taken = set(
            Tool.objects.filter(tenant_id=upstream.tenant_id).exclude(upstream=upstream).values_list("name", flat=True)
        )
        seen: set[str] = set()
        for item in remote.tools:
            remote_name = str(item.get("name") or "")
            name = prefixed(prefix, remote_name)
            text = _Text()
            fields = _tool_fields(item, text)
            try:
                validate_tool_name(name)
                validate_object_schema(fields["input_schema"])
                validate_object_schema(fields["output_schema"])
            except ValidationError as exc:
                report.skipped.append(f"tool {name!r}: {'; '.join(exc.messages)}")
                continue
            if name in taken:
                report.skipped.append(f"tool {name!r}: the tenant's catalog already has a tool of that name")
                continue
            if remote_name in seen:
                report.skipped.append(f"tool {name!r}: listed twice by the upstream")
                continue
            if not _admitted(report, f"tool {name!r}", fields, text):
                continue
            seen.add(remote_name)
            tool = existing.get(remote_name)
            if tool is None:
                Tool.objects.create(
                    tenant_id=upstream.tenant_id,
                    kind=Tool.Kind.UPSTREAM,
                    upstream=upstream,
                    remote_name=remote_name,
                    name=name,
                    **fields,
                )
                report.added.append(name)
            elif tool.name != name or _changed(tool, fields):
                tool.name = name
                for key, value in fields.items():
                    setattr(tool, key, value)
                tool.save()
                report.updated.append(name)
        for remote_name, tool in existing.items():
            if remote_name not in seen:
                report.removed.append(tool.name)
                tool.delete()

        # Resources and templates (keyed by URI).
        existing_resources = {resource.uri: resource for resource in Resource.objects.filter(upstream=upstream)}
        taken_uris = set(
            Resource.objects.filter(tenant_id=upstream.tenant_id)
            .exclude(upstream=upstream)
            .values_list("uri", flat=True)
        )
        seen_uris: set[str] = set()
        for item, template in [(r, False) for r in remote.resources] + [(t, True) for t in remote.templates]:
            uri = str(item.get("uriTemplate" if template else "uri") or "")
            text = _Text()
            fields = _resource_fields(item, prefix, template, text)
            if not uri or len(uri) > 2000 or ("://" not in uri and not uri.startswith(("urn:", "data:"))):
                report.skipped.append(f"resource {uri[:100]!r}: not a URI mcp-host can serve")
                continue
            if uri in taken_uris:
                report.skipped.append(f"resource {uri!r}: the tenant's catalog already has a resource of that URI")
                continue
            problem = _template_problem(uri) if template else None
            if problem is not None:
                report.skipped.append(f"resource {uri[:100]!r}: {problem}")
                continue
            if uri in seen_uris or not _admitted(report, f"resource {uri[:100]!r}", fields, text):
                continue
            seen_uris.add(uri)
            resource = existing_resources.get(uri)
            if resource is None:
                Resource.objects.create(
                    tenant_id=upstream.tenant_id, kind=Resource.Kind.UPSTREAM, upstream=upstream, uri=uri, **fields
                )
                report.added.append(uri)
            elif _changed(resource, fields):
                for key, value in fields.items():
                    setattr(resource, key, value)
                resource.save()
                report.updated.append(uri)
        for uri, resource in existing_resources.items():
            if uri not in seen_uris:
                report.removed.append(uri)
                resource.delete()

        # Prompts.
        existing_prompts = {prompt.remote_name: prompt for prompt in Prompt.objects.filter(upstream=upstream)}
        taken_prompts = set(
            Prompt.objects.filter(tenant_id=upstream.tenant_id)
            .exclude(upstream=upstream)
            .values_list("name", flat=True)
        )
        seen_prompts: set[str] = set()
        for item in remote.prompts:
            remote_name = str(item.get("name") or "")
            name = prefixed(prefix, remote_name)
            text = _Text()
            fields = _prompt_fields(item, text)
            try:
                validate_tool_name(name)
            except ValidationError as exc:
                report.skipped.append(f"prompt {name!r}: {'; '.join(exc.messages)}")
                continue
            if name in taken_prompts:
                report.skipped.append(f"prompt {name!r}: the tenant's catalog already has a prompt of that name")
                continue
            if remote_name in seen_prompts or not _admitted(report, f"prompt {name!r}", fields, text):
                continue
            seen_prompts.add(remote_name)
            prompt = existing_prompts.get(remote_name)
            if prompt is None:
                Prompt.objects.create(
                    tenant_id=upstream.tenant_id,
                    kind=Prompt.Kind.UPSTREAM,
                    upstream=upstream,
                    remote_name=remote_name,
                    name=name,
                    **fields,
                )
                report.added.append(f"prompt {name}")
            elif prompt.name != name or _changed(prompt, fields):
                prompt.name = name
                for key, value in fields.items():
                    setattr(prompt, key, value)
                prompt.save()
                report.updated.append(f"prompt {name}")
        for remote_name, prompt in existing_prompts.items():
            if remote_name not in seen_prompts:
                report.removed.append(f"prompt {prompt.name}")
                prompt.delete()

        for binding in upstream.bindings.select_related("server"):
            report.skipped.extend(expose(upstream, binding.server))

        # Not save(): updated_at is the connection's revision, and a sync does not change how to connect.
        Upstream.objects.filter(pk=upstream.pk).update(
            protocol_version=remote.protocol_version[:32],
            server_info=remote.server_info,
            capabilities=remote.capabilities,
            last_synced_at=timezone.now(),
            last_sync_error="",
        )
    return report


def expose(upstream: Any, server: Any) -> list[str]:
    """Bind every entry of ``upstream`` that ``server`` does not expose yet; returns what could not be (a name
    the server already exposes for another entry)."""
    from ..models import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool

    skipped: list[str] = []
    bound = set(ServerTool.objects.filter(server=server, tool__upstream=upstream).values_list("tool_id", flat=True))
    exposed = {binding.exposed_name for binding in ServerTool.objects.filter(server=server).select_related("tool")}
    position = (
        ServerTool.objects.filter(server=server).order_by("-position").values_list("position", flat=True).first() or 0
    )
    for tool in Tool.objects.filter(upstream=upstream).exclude(pk__in=bound).order_by("name"):
        if tool.name in exposed:
            skipped.append(f"tool {tool.name!r}: server {server.server_id} already exposes a tool of that name")
            continue
        position += 1
        ServerTool.objects.create(server=server, tool=tool, position=position)
    bound_resources = set(
        ServerResource.objects.filter(server=server, resource__upstream=upstream).values_list("resource_id", flat=True)
    )
    for resource in Resource.objects.filter(upstream=upstream).exclude(pk__in=bound_resources).order_by("uri"):
        ServerResource.objects.create(server=server, resource=resource)
    bound_prompts = set(
        ServerPrompt.objects.filter(server=server, prompt__upstream=upstream).values_list("prompt_id", flat=True)
    )
    exposed_prompts = set(ServerPrompt.objects.filter(server=server).values_list("prompt__name", flat=True))
    for prompt in Prompt.objects.filter(upstream=upstream).exclude(pk__in=bound_prompts).order_by("name"):
        if prompt.name in exposed_prompts:
            skipped.append(f"prompt {prompt.name!r}: server {server.server_id} already exposes a prompt of that name")
            continue
        ServerPrompt.objects.create(server=server, prompt=prompt)
    return skipped


def bind(upstream: Any, server: Any) -> list[str]:
    """Expose ``upstream`` as a whole on ``server`` (now and after every sync); returns what was skipped."""
    from ..models import UpstreamBinding

    with transaction.atomic():
        UpstreamBinding.objects.get_or_create(upstream=upstream, server=server)
        return expose(upstream, server)


def unbind(upstream: Any, server: Any) -> None:
    """Stop exposing ``upstream`` on ``server``: the binding and every entry binding of it there go."""
    from ..models import ServerPrompt, ServerResource, ServerTool, UpstreamBinding

    with transaction.atomic():
        UpstreamBinding.objects.filter(upstream=upstream, server=server).delete()
        for model, field_name in ((ServerTool, "tool"), (ServerResource, "resource"), (ServerPrompt, "prompt")):
            for binding in model.objects.filter(server=server, **{f"{field_name}__upstream": upstream}):
                binding.delete()  # one by one: each bump and announcement goes out (catalog.signals)


def _record_failure(upstream: Any, error: str) -> None:
    from ..models import Upstream

    Upstream.objects.filter(pk=upstream.pk).update(last_sync_error=error[:2000])


def sync_upstream(upstream: Any) -> SyncReport:
    """Read and import ``upstream``'s catalog now (sync code, outside an event loop)."""
    from ..definitions.upstreams import endpoint_of

    try:
        remote = async_to_sync(fetch)(endpoint_of(upstream))
    except Exception as exc:
        error = describe_failure(exc)
        _record_failure(upstream, error)
        logger.info("sync of upstream %s failed: %s", upstream.name, error)
        return SyncReport(error=error)
    return apply(upstream, remote)


def describe_failure(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, UpstreamForbidden):
        return f"The address is not allowed: {exc}"
    if isinstance(exc, UpstreamUnavailable):
        return f"Could not connect: {exc}"
    if unreachable(exc):
        return f"Could not connect: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if isinstance(exc, TimeoutError):
        return "The upstream did not answer in time"
    return f"The upstream's answer was not usable ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"


# list_changed ----------------------------------------------------------------------------------------------------

_running: dict[int, asyncio.Task[None]] = {}
_again: set[int] = set()


def changed(pk: int, kind: str) -> None:
    """The upstream ``pk`` said its ``kind`` list changed: sync it from this loop (at most one at a time)."""
    task = _running.get(pk)
    if task is not None and not task.done():
        _again.add(pk)
        return
    task = asyncio.get_running_loop().create_task(_sync_soon(pk), name=f"mcp-upstream-sync-{pk}")
    _running[pk] = task


async def _sync_soon(pk: int) -> None:
    from channels.db import database_sync_to_async

    from ..definitions.upstreams import endpoint_of
    from ..models import Upstream

    try:
        while True:
            _again.discard(pk)
            upstream = await database_sync_to_async(Upstream.objects.filter(pk=pk, enabled=True).first)()
            if upstream is None:
                return
            try:
                remote = await fetch(endpoint_of(upstream))
            except Exception as exc:
                await database_sync_to_async(_record_failure)(upstream, describe_failure(exc))
                return
            report = await database_sync_to_async(apply)(upstream, remote)
            logger.info(
                "upstream %s changed: +%d ~%d -%d",
                upstream.name,
                len(report.added),
                len(report.updated),
                len(report.removed),
            )
            if pk not in _again:
                return
    except Exception:
        logger.exception("sync of upstream %s after list_changed failed", pk)
    finally:
        _running.pop(pk, None)
