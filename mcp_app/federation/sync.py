"""Catalog sync: an upstream's tools, resources, resource templates and prompts imported under its prefix.

``sync_upstream(upstream)`` (sync code: the API, the admin, ``mcp_upstream``, Celery beat) reads the upstream's
lists over a fresh connection (``fetch``) and writes them in one transaction (``apply``), every kind by the same
loop (one row of ``entry_kinds()`` each), reporting what it skipped or cleaned (``SyncReport``), then tells
``upstream_synced`` which servers expose the upstream (``catalog.drift`` publishes or holds its changes);
``changed`` syncs an upstream whose ``list_changed`` a pooled connection heard. A failed sync keeps the catalog as it was and records
why. Design: docs/upstreams.md ("Sync", "What an upstream's catalog may bring in").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from mcp_types import PaginatedRequestParams

from ..conf import mcp_settings
from ..definitions.prompts import validate_uri_template
from ..definitions.upstreams import UpstreamEndpoint, clean_text, endpoint_of, has_fake_tag, prefixed
from ..models import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool, Upstream, UpstreamBinding
from ..models.catalog import CatalogBinding, CatalogEntry, validate_object_schema, validate_tool_name
from ..models.upstreams import upstream_synced
from .connection import UpstreamForbidden, UpstreamUnavailable, open_client, root, unreachable

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

    error: str = ""  # first: ``as_dict`` keeps the order of the fields
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **asdict(self)}


# Reading ---------------------------------------------------------------------------------------------------------


@dataclass
class _Budget:
    """The bytes of catalog one sync may still read (``UPSTREAM_MAX_CATALOG_BYTES``, descriptions cut first)."""

    left: int


async def _all(list_method: Any, attribute: str, limit: int, budget: _Budget) -> tuple[list[dict[str, Any]], str]:
    """Every page of a list (``list_method`` of the session), as wire dicts, at most ``limit`` items and ``budget``
    bytes; with why it stopped short (``"count"``, ``"bytes"``) or ``""``."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    description_limit = int(mcp_settings.UPSTREAM_MAX_DESCRIPTION_CHARS)
    for _page in range(1000):
        page = await list_method(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
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


#: The lists a sync reads, in order (``apply`` writes them per kind, ``entry_kinds``): the ``RemoteCatalog`` list
#: each fills, the capability that offers it, the client session's method and the attribute of its result.
LISTS = (
    ("tools", "tools", "list_tools", "tools"),
    ("resources", "resources", "list_resources", "resources"),
    ("templates", "resources", "list_resource_templates", "resource_templates"),
    ("prompts", "prompts", "list_prompts", "prompts"),
)


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
            for kind, capability, method, attribute in LISTS:
                if getattr(capabilities, capability) is None:
                    continue
                items, stopped = await _all(getattr(client.session, method), attribute, limit, budget)
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
        self.flags: dict[str, None] = {}  # an ordered set

    def __call__(self, value: Any, limit: int | None = None) -> str:
        text, cleaned = clean_text(str(value or ""))
        if cleaned:
            self.flags["control, zero-width or bidi-override characters removed"] = None
        if has_fake_tag(text):
            self.flags["holds a tag posing as a role marker (<system>, <|im_start|>, ...)"] = None
        limit = int(mcp_settings.UPSTREAM_MAX_DESCRIPTION_CHARS) if limit is None else limit
        if len(text) > limit:
            self.flags[f"text cut at {limit} characters"] = None
            text = text[:limit]
        return text


def _tool(item: dict[str, Any], prefix: str, text: _Text, listed: str) -> dict[str, Any]:
    remote_name = str(item.get("name") or "")
    execution = item.get("execution")
    task_support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return {
        "name": prefixed(prefix, remote_name),
        "remote_name": remote_name,
        "title": text(item.get("title") or (item.get("annotations") or {}).get("title"), 200),
        "description": text(item.get("description")),
        "input_schema": item.get("inputSchema") or {"type": "object"},
        "output_schema": item.get("outputSchema"),
        "annotations": item.get("annotations"),
        "icons": item.get("icons"),
        # A proxied call never becomes a task upstream; here it may, like any tool, when the upstream says so.
        "task_support": task_support if task_support in ("optional", "required") else "forbidden",
    }


def _check_tool(fields: dict[str, Any]) -> None:
    validate_tool_name(fields["name"])
    validate_object_schema(fields["input_schema"])
    validate_object_schema(fields["output_schema"])


def _resource(item: dict[str, Any], prefix: str, text: _Text, listed: str) -> dict[str, Any]:
    template = listed == "templates"
    return {
        "uri": str(item.get("uriTemplate" if template else "uri") or ""),
        "name": prefixed(prefix, text(item.get("name"), 200))[:200],
        "remote_name": str(item.get("name") or "")[:200],
        "title": text(item.get("title"), 200),
        "description": text(item.get("description")),
        "mime_type": text(item.get("mimeType"), 200),
        "annotations": item.get("annotations"),
        "is_template": template,
    }


def _check_resource(fields: dict[str, Any]) -> None:
    """A URI mcp-host can serve; a template refused as a tenant's would be (``validate_uri_template``)."""
    uri = fields["uri"]
    if not uri or len(uri) > 2000 or ("://" not in uri and not uri.startswith(("urn:", "data:"))):
        raise ValidationError("not a URI mcp-host can serve")
    try:
        if fields["is_template"]:
            validate_uri_template(uri)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def _prompt(item: dict[str, Any], prefix: str, text: _Text, listed: str) -> dict[str, Any]:
    remote_name = str(item.get("name") or "")
    arguments = [
        {
            "name": text(argument.get("name"), 200),
            **({"description": text(argument["description"])} if argument.get("description") else {}),
            "required": bool(argument.get("required", False)),
        }
        for argument in item.get("arguments") or ()
        if isinstance(argument, dict) and argument.get("name")
    ]
    return {
        "name": prefixed(prefix, remote_name),
        "remote_name": remote_name,
        "title": text(item.get("title"), 200),
        "description": text(item.get("description")),
        "arguments": arguments,
    }


def _check_prompt(fields: dict[str, Any]) -> None:
    validate_tool_name(fields["name"])


@dataclass(frozen=True)
class EntryKind:
    """How one kind of catalog entry comes from an upstream: ``lists`` (of ``RemoteCatalog``) its items come from,
    ``read`` their stored fields (text made safe by ``text``), ``check`` raising ``ValidationError`` for one mcp-host
    cannot hold, ``match`` the field that finds it again at the next sync, ``label`` how the report names it."""

    model: type[CatalogEntry]
    binding: type[CatalogBinding]
    lists: tuple[str, ...]
    read: Callable[[dict[str, Any], str, _Text, str], dict[str, Any]]
    check: Callable[[dict[str, Any]], None]
    match: str = "remote_name"
    label: str = "{}"

    @property
    def noun(self) -> str:
        return self.model._meta.model_name or ""

    @property
    def key_name(self) -> str:
        return str(getattr(self.model._meta.get_field(self.model.key), "verbose_name", self.model.key))


def entry_kinds() -> tuple[EntryKind, ...]:
    return (
        EntryKind(Tool, ServerTool, ("tools",), _tool, _check_tool),
        EntryKind(Resource, ServerResource, ("resources", "templates"), _resource, _check_resource, match="uri"),
        EntryKind(Prompt, ServerPrompt, ("prompts",), _prompt, _check_prompt, label="prompt {}"),
    )


def _admitted(report: SyncReport, what: str, fields: dict[str, Any], text: _Text) -> bool:
    """Whether the entry's stored fields fit ``UPSTREAM_MAX_ENTRY_BYTES`` (else skipped); notes its flags."""
    limit = int(mcp_settings.UPSTREAM_MAX_ENTRY_BYTES)
    size = len(orjson.dumps(fields))
    if size > limit:
        report.skipped.append(f"{what}: {size} bytes, more than the {limit} an entry may have")
        return False
    report.flagged.extend(f"{what}: {why}" for why in text.flags)
    return True


def _import(kind: EntryKind, upstream: Any, remote: RemoteCatalog, report: SyncReport) -> None:
    """Write one kind of ``remote``'s entries as ``upstream``'s: create, update, delete; skip (reported) what
    cannot be imported: an invalid entry, one whose key another entry of the tenant has, one listed twice."""
    model, key = kind.model, kind.model.key
    existing = {getattr(entry, kind.match): entry for entry in model._default_manager.filter(upstream=upstream)}
    taken = set(
        model._default_manager.filter(tenant_id=upstream.tenant_id)
        .exclude(upstream=upstream)
        .values_list(key, flat=True)
    )
    seen: set[str] = set()
    for listed in kind.lists:
        for item in getattr(remote, listed):
            text = _Text()
            fields = kind.read(item, upstream.prefix, text, listed)
            what = f"{kind.noun} {str(fields[key])[:128]!r}"
            try:
                kind.check(fields)
            except ValidationError as exc:
                report.skipped.append(f"{what}: {'; '.join(exc.messages)}")
                continue
            if fields[key] in taken:
                report.skipped.append(f"{what}: the tenant's catalog already has a {kind.noun} of that {kind.key_name}")
                continue
            if fields[kind.match] in seen:
                report.skipped.append(f"{what}: listed twice by the upstream")
                continue
            if not _admitted(report, what, fields, text):
                continue
            seen.add(fields[kind.match])
            entry = existing.get(fields[kind.match])
            if entry is None:
                origin = {"tenant_id": upstream.tenant_id, "kind": "upstream", "upstream": upstream}
                model._default_manager.create(**origin, **fields)
                report.added.append(kind.label.format(fields[key]))
            elif any(getattr(entry, name) != value for name, value in fields.items()):
                for name, value in fields.items():
                    setattr(entry, name, value)
                entry.upstream = upstream  # known: the same-tenant rule checks it on save without a query
                entry.save()
                report.updated.append(kind.label.format(fields[key]))
    for match, entry in existing.items():
        if match not in seen:
            report.removed.append(kind.label.format(getattr(entry, key)))
            entry.delete()


def apply(upstream: Any, remote: RemoteCatalog) -> SyncReport:
    """Write ``remote`` as ``upstream``'s entries (one transaction), bind them where the upstream is bound whole."""
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
    with transaction.atomic():
        # One sync of an upstream at a time across processes (every process that heard its list_changed syncs
        # it): the row lock makes the later ones find the entries the first wrote, and change nothing.
        current = Upstream.objects.select_for_update().select_related("tenant").filter(pk=upstream.pk).first()
        servers = exposing(upstream)  # before: a server that exposed only entries the upstream removed counts
        for kind in entry_kinds():
            _import(kind, upstream, remote, report)
        for binding in upstream.bindings.select_related("server"):
            report.skipped.extend(expose(upstream, binding.server))
        if current is not None:  # its changes published or held for approval (catalog.drift)
            upstream_synced.send(Upstream, upstream=current, servers=servers | exposing(upstream))

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
    """Bind every entry of ``upstream`` that ``server`` does not expose yet, after those it does; returns what
    could not be (a name the server already exposes for another entry)."""
    skipped: list[str] = []
    for kind in entry_kinds():
        entry_field = kind.binding.entry_field()
        # By keyword dicts: each concrete binding declares ``server`` (its own related name), not the base.
        bindings = kind.binding._default_manager.filter(**{"server": server})
        bound = bindings.filter(**{f"{entry_field}__upstream": upstream}).values_list(f"{entry_field}_id", flat=True)
        exposed = {binding.exposed_name for binding in bindings.select_related(entry_field)}
        position = bindings.order_by("-position").values_list("position", flat=True).first() or 0
        for entry in (
            kind.model._default_manager.filter(upstream=upstream).exclude(pk__in=bound).order_by(kind.model.key)
        ):
            name = getattr(entry, kind.model.key)
            if name in exposed:
                skipped.append(
                    f"{kind.noun} {name!r}: server {server.server_id} already exposes a {kind.noun} of that "
                    f"{kind.key_name}"
                )
                continue
            position += 1
            kind.binding._default_manager.create(**{"server": server, "position": position, entry_field: entry})
    return skipped


def exposing(upstream: Any) -> set[int]:
    """The primary keys of the servers that expose ``upstream`` whole or any of its entries."""
    servers = set(UpstreamBinding.objects.filter(upstream=upstream).values_list("server_id", flat=True))
    for kind in entry_kinds():
        # By keyword dicts and names: each concrete binding declares ``server``, not the base.
        lookup, column = {f"{kind.binding.entry_field()}__upstream": upstream}, "server_id"
        servers.update(kind.binding._default_manager.filter(**lookup).values_list(column, flat=True))
    return servers


def bind(upstream: Any, server: Any) -> list[str]:
    """Expose ``upstream`` as a whole on ``server`` (now and after every sync); returns what was skipped."""
    with transaction.atomic():
        UpstreamBinding.objects.get_or_create(upstream=upstream, server=server)
        return expose(upstream, server)


def unbind(upstream: Any, server: Any) -> None:
    """Stop exposing ``upstream`` on ``server``: the binding and every entry binding of it there go."""
    with transaction.atomic():
        UpstreamBinding.objects.filter(upstream=upstream, server=server).delete()
        for kind in entry_kinds():
            lookup = {"server": server, f"{kind.binding.entry_field()}__upstream": upstream}
            for binding in kind.binding._default_manager.filter(**lookup):
                binding.delete()  # one by one: each bump and announcement goes out (catalog.signals)


def _record_failure(upstream: Any, error: str) -> None:
    Upstream.objects.filter(pk=upstream.pk).update(last_sync_error=error[:2000])


def sync_upstream(upstream: Any) -> SyncReport:
    """Read and import ``upstream``'s catalog now (sync code, outside an event loop)."""
    try:
        remote = async_to_sync(fetch)(endpoint_of(upstream))
    except Exception as exc:
        error = describe_failure(exc)
        _record_failure(upstream, error)
        logger.info("sync of upstream %s failed: %s", upstream.name, error)
        return SyncReport(error=error)
    return apply(upstream, remote)


def describe_failure(exc: BaseException) -> str:
    exc = root(exc)
    if isinstance(exc, UpstreamForbidden):
        return f"The address is not allowed: {exc}"
    if isinstance(exc, UpstreamUnavailable):
        return f"Could not connect: {exc}"
    first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
    if unreachable(exc):
        return f"Could not connect: {type(exc).__name__}: {first_line}"
    if isinstance(exc, TimeoutError):
        return "The upstream did not answer in time"
    return f"The upstream's answer was not usable ({type(exc).__name__}: {first_line})"


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
