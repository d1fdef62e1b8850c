"""Catalog versions: what a server exposes, as immutable content-addressed snapshots, and the verbs on them.

A server's *draft* is what its rows describe now (``draft_entries``); what it serves is its *published* version
(``published_entries``, ``McpServer.published_version``), or its draft while it has none. ``publish`` makes a
version of a list of entries (by default the draft) and points the server at it, atomically; it is the one place
that announces ``notifications/*/list_changed``, for exactly the lists whose content changed. ``rollback``
republishes an earlier version's entries. ``auto_publish`` publishes edits at once on servers that do not review
them (``review_edits`` off), keeping upstream changes held for approval (``CatalogChange``) out. ``diff`` compares
two lists of entries for people. Serving a version is ``catalog.resolver``'s. Design: docs/catalog-versions.md.

An entry is ``{"list", "ref", "upstream", "definition"}``: the list it is in (``models.versions.LISTS``), the catalog
row it comes from (its primary key; the version's entry is served with that row's target), the row's upstream (or
``None``) and the entry's wire definition as the list methods render it. The digest covers lists and definitions
only: the same content has the same digest whatever rows it came from.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from ..events import publish_to_servers
from ..models import CatalogChange, CatalogVersion, McpServer, Prompt, Resource, Tool
from ..models.versions import KEY_FIELDS, LISTS
from ..protocol.canonical import canonical_json, json_digest
from ..protocol.messages import list_changed
from .resolver import build_draft

logger = logging.getLogger("mcp_app.catalog")

Entry = dict[str, Any]

# The list_changed notification that tells a client each list changed (templates are listed with resources).
_NOTIFIED = {"tools": "tools", "resources": "resources", "resourceTemplates": "resources", "prompts": "prompts"}
_ROW_MODELS: dict[str, type[Tool] | type[Resource] | type[Prompt]] = {
    "tools": Tool,
    "resources": Resource,
    "resourceTemplates": Resource,
    "prompts": Prompt,
}


def entry_key(entry: Mapping[str, Any]) -> str:
    """The name (tools, prompts) or URI (resources, templates) an entry is exposed under."""
    return str(entry["definition"].get(KEY_FIELDS[entry["list"]], ""))


def draft_entries(server: McpServer) -> list[Entry]:
    """What ``server`` would serve from its rows now, in list order."""
    catalog = build_draft(server)
    lists = (
        ("tools", catalog.tools),
        ("resources", catalog.resources),
        ("resourceTemplates", catalog.templates),
        ("prompts", catalog.prompts),
    )
    upstreams: dict[str, dict[int | None, int | None]] = {}
    for name, descriptors in lists:
        refs = [d.ref for d in descriptors if d.ref is not None]
        rows = _ROW_MODELS[name]._default_manager.filter(pk__in=refs)
        upstreams[name] = dict(rows.values_list("pk", "upstream_id")) if refs else {}
    return [
        {
            "list": name,
            "ref": descriptor.ref,
            "upstream": upstreams[name].get(descriptor.ref),
            "definition": descriptor.to_wire(),
        }
        for name, descriptors in lists
        for descriptor in descriptors
    ]


def published_entries(server: McpServer) -> list[Entry]:
    """The entries of the version ``server`` serves (read from the database); ``[]`` when none is published."""
    entries = McpServer.objects.filter(pk=server.pk).values_list("published_version__entries", flat=True).first()
    return list(entries or ())


def entries_digest(entries: Sequence[Mapping[str, Any]]) -> str:
    """The sha256 of the canonical JSON of ``[[list, definition], ...]``: refs and upstreams do not count."""
    return json_digest([[entry["list"], entry["definition"]] for entry in entries])


@dataclass(frozen=True)
class FieldChange:
    """One top-level wire field of an entry that differs (``None``: absent on that side)."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class EntryDiff:
    """One entry added, removed or changed between two lists of entries; ``fields`` for a change."""

    list_name: str
    key: str
    change: str  # "added" | "removed" | "changed"
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    fields: tuple[FieldChange, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "list": self.list_name,
            "key": self.key,
            "change": self.change,
            "old": self.old,
            "new": self.new,
            "fields": [{"field": f.field, "old": f.old, "new": f.new} for f in self.fields],
        }


def _same(left: Any, right: Any) -> bool:
    """Whether two JSON values are the same JSON (key order and number spelling do not count)."""
    return canonical_json(left) == canonical_json(right)


def _field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    names = [*old, *(name for name in new if name not in old)]
    return tuple(
        FieldChange(name, old.get(name), new.get(name)) for name in names if not _same(old.get(name), new.get(name))
    )


def diff(old_entries: Sequence[Mapping[str, Any]], new_entries: Sequence[Mapping[str, Any]]) -> list[EntryDiff]:
    """What changed from ``old_entries`` to ``new_entries``: entries matched by (list, ref), then by (list, name
    or URI); new entries' changes and additions in their order, then removals in the old order."""
    unmatched = list(range(len(old_entries)))
    by_ref = {(e["list"], e.get("ref")): i for i, e in enumerate(old_entries) if e.get("ref") is not None}
    by_key = {(e["list"], entry_key(e)): i for i, e in enumerate(old_entries)}
    changes: list[EntryDiff] = []
    for entry in new_entries:
        index = by_ref.get((entry["list"], entry.get("ref"))) if entry.get("ref") is not None else None
        if index is None or index not in unmatched:
            index = by_key.get((entry["list"], entry_key(entry)))
        if index is None or index not in unmatched:
            changes.append(EntryDiff(entry["list"], entry_key(entry), "added", None, dict(entry["definition"])))
            continue
        unmatched.remove(index)
        old = old_entries[index]["definition"]
        fields = _field_changes(old, entry["definition"])
        if fields:
            changes.append(
                EntryDiff(entry["list"], entry_key(entry), "changed", dict(old), dict(entry["definition"]), fields)
            )
    for index in unmatched:
        old_entry = old_entries[index]
        changes.append(
            EntryDiff(old_entry["list"], entry_key(old_entry), "removed", dict(old_entry["definition"]), None)
        )
    return changes


def _list_contents(entries: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    contents: dict[str, list[Any]] = {name: [] for name in LISTS}
    for entry in entries:
        contents[entry["list"]].append(entry["definition"])
    return contents


def _changed_lists(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> set[str]:
    before, after = _list_contents(old), _list_contents(new)
    return {name for name in LISTS if not _same(before[name], after[name])}


def _clean(entries: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """Entries as a version stores them: exactly the four keys, lists known, in list order."""
    cleaned = [
        {
            "list": entry["list"],
            "ref": entry.get("ref"),
            "upstream": entry.get("upstream"),
            "definition": dict(entry["definition"]),
        }
        for entry in entries
    ]
    unknown = {entry["list"] for entry in cleaned} - set(LISTS)
    if unknown:
        raise ValueError(f"unknown catalog list(s): {', '.join(sorted(unknown))}")
    return sorted(cleaned, key=lambda entry: LISTS.index(entry["list"]))


def publish(
    server: McpServer,
    *,
    entries: Sequence[Mapping[str, Any]] | None = None,
    user: Any = None,
    source: str = CatalogVersion.Source.PUBLISH,
    note: str = "",
    rolled_back_to: int | None = None,
) -> CatalogVersion:
    """Publish ``entries`` (``None``: the server's draft) as the version ``server`` serves, on every process.

    A new version numbered after the server's last, unless it serves the same content already (then that version
    is returned and nothing is written). Pending held changes the version carries are marked published. Lists
    whose content changed are announced to live streams after commit."""
    return _publish(server, entries=entries, user=user, source=source, note=note, rolled_back_to=rolled_back_to)


def _publish(
    server: McpServer,
    *,
    entries: Sequence[Mapping[str, Any]] | None,
    user: Any = None,
    source: str = CatalogVersion.Source.PUBLISH,
    note: str = "",
    rolled_back_to: int | None = None,
    first_changed: Iterable[str] = (),
) -> CatalogVersion:
    # ``first_changed``: with no version published yet, the lists to announce besides those that differ from the
    # draft (an edit publishing a server's first version changed what its draft served a moment ago).
    with transaction.atomic():
        locked = McpServer.objects.select_for_update().get(pk=server.pk)
        current = (
            CatalogVersion.objects.filter(pk=locked.published_version_id).first()
            if locked.published_version_id
            else None
        )
        draft = draft_entries(locked) if entries is None or current is None else []
        chosen = _clean(draft if entries is None else entries)
        digest = entries_digest(chosen)
        if current is not None and current.digest == digest:
            server.published_version = current
            return current
        last = CatalogVersion.objects.filter(server=locked).aggregate(last=Max("number"))["last"] or 0
        version = CatalogVersion.objects.create(
            tenant_id=locked.tenant_id,
            server=locked,
            number=last + 1,
            digest=digest,
            entries=chosen,
            source=source,
            note=note[:500],
            rolled_back_to=rolled_back_to,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        McpServer.objects.filter(pk=locked.pk).update(published_version=version)
        _resolve_changes(locked, version)
        if current is not None:
            changed = _changed_lists(current.entries, chosen)
        else:
            changed = _changed_lists(draft, chosen) | set(first_changed)
        McpServer.objects.bump_catalog_version({locked.pk}, announce=False)
        for kind in sorted({_NOTIFIED[name] for name in changed}):
            publish_to_servers({locked.pk}, list_changed(kind))
    server.published_version = version
    logger.info(
        "published %s v%s (%s, digest %s, changed %s)",
        locked.server_id,
        version.number,
        source,
        version.short_digest,
        ", ".join(sorted(changed)) or "nothing",
    )
    return version


def _resolve_changes(server: McpServer, version: CatalogVersion) -> None:
    """Mark the server's pending held changes that ``version`` carries (its ``new`` definition; ``None``:
    absent) published in it."""
    served = {(entry["list"], entry_key(entry)): entry["definition"] for entry in version.entries}
    carried = [
        change.pk
        for change in CatalogChange.objects.pending().filter(server=server)
        if _same(served.get((change.list_name, change.key)), change.new)
    ]
    if carried:
        CatalogChange.objects.filter(pk__in=carried).update(
            status=CatalogChange.Status.PUBLISHED, resolved_in=version, resolved_at=timezone.now()
        )


def rollback(server: McpServer, number: int, *, user: Any = None) -> CatalogVersion:
    """Republish version ``number`` of ``server`` (a new version with its entries, ``rolled_back_to`` it).
    ``CatalogVersion.DoesNotExist`` when the server has no such version."""
    earlier = CatalogVersion.objects.get(server_id=server.pk, number=number)
    return publish(
        server,
        entries=earlier.entries,
        user=user,
        source=CatalogVersion.Source.ROLLBACK,
        note=f"Rollback to version {number}",
        rolled_back_to=number,
    )


def held_entries(server: McpServer, draft: Sequence[Mapping[str, Any]] | None = None) -> list[Entry]:
    """The draft (given, or ``server``'s) with the server's pending held changes kept out: a changed entry keeps
    its published definition, an added one stays out, a removed one keeps its published entry."""
    entries = [dict(entry) for entry in (draft_entries(server) if draft is None else draft)]
    held = list(
        CatalogChange.objects.pending().filter(server_id=server.pk).values_list("list_name", "key", "ref", "change")
    )
    if not held:
        return entries
    served = published_entries(server)
    published = {(entry["list"], entry_key(entry)): entry for entry in served}
    by_ref = {(entry["list"], entry.get("ref")): entry for entry in served if entry.get("ref") is not None}

    def same(entry: Mapping[str, Any], list_name: str, key: str, ref: int | None) -> bool:
        # The row first: a change may rename it (a new prefix with the upstream's change), its key then differs.
        if ref is not None and entry["list"] == list_name and entry.get("ref") == ref:
            return True
        return (entry["list"], entry_key(entry)) == (list_name, key)

    for list_name, key, ref, change in held:
        position = next((i for i, e in enumerate(entries) if same(e, list_name, key, ref)), None)
        kept = by_ref.get((list_name, ref)) if ref is not None else None
        kept = kept or published.get((list_name, key))
        if change == CatalogChange.Change.ADDED:
            if position is not None:
                del entries[position]
        elif kept is None:
            continue
        elif position is not None:
            entries[position] = dict(kept)
        elif change == CatalogChange.Change.REMOVED:
            entries.append(dict(kept))
    return _clean(entries)


def auto_publish(server_ids: Iterable[int]) -> None:
    """Publish the edits of these servers that do not review them (``review_edits`` off): the draft with held
    upstream changes kept out (``held_entries``)."""
    _auto_publish({pk: () for pk in server_ids})


def _auto_publish(hints: Mapping[int, Iterable[str]]) -> None:
    servers = McpServer.objects.filter(pk__in=list(hints), review_edits=False).select_related("tenant")
    for server in servers:
        try:
            _publish(
                server,
                entries=held_entries(server),
                source=CatalogVersion.Source.EDIT,
                first_changed=hints[server.pk],
            )
        except Exception:
            # The edit is committed; the server keeps serving its published version until the next edit.
            logger.exception("could not publish the edits of server %s", server.pk)


class _Batch:
    """The servers edited in one transaction (with the lists each edit touched), published once it commits."""

    def __init__(self) -> None:
        self.servers: dict[int, set[str]] = {}
        self.done = False

    def __call__(self) -> None:
        if not self.done:  # each edit registered it; the first hook to run publishes them all
            self.done = True
            _auto_publish(self.servers)


# The batch of the current transaction, per thread. Only the transaction's commit hooks hold it: a rollback that
# drops the hooks drops the batch too (the weak reference dies), so a rolled-back edit is never published later.
_current = threading.local()


def schedule_auto_publish(server_ids: Iterable[int], lists: Iterable[str] = ()) -> None:
    """Run ``auto_publish`` for these servers once the current transaction commits (at once outside one), once
    per server however many edits the transaction made; ``lists``: the lists the edits touched (announced if the
    server publishes its first version)."""
    reference = getattr(_current, "batch", None)
    batch: _Batch | None = reference() if reference is not None else None
    if batch is None or batch.done:
        batch = _Batch()
        _current.batch = weakref.ref(batch)
    touched = {kind for kind in lists if kind in _NOTIFIED}
    for pk in server_ids:
        batch.servers.setdefault(pk, set()).update(touched)
    transaction.on_commit(batch)  # after filling it: outside a transaction it runs at once


def ensure_baseline(server: McpServer) -> CatalogVersion | None:
    """Publish ``server``'s draft as its first version if it has none (a server that starts reviewing edits
    needs one to serve while edits wait); the version it serves otherwise."""
    with transaction.atomic():
        locked = McpServer.objects.select_for_update().get(pk=server.pk)
        if locked.published_version_id is None:
            return _publish(locked, entries=None, source=CatalogVersion.Source.INITIAL)
        return CatalogVersion.objects.filter(pk=locked.published_version_id).first()
