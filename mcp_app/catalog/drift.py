"""Upstream drift held for approval: what a sync found changed in an upstream's entries, per its ``on_change``.

``after_sync`` hears ``upstream_synced``: in the sync's transaction (``federation.sync.apply``), after the entries
were written, with the servers that exposed or expose the upstream. On each one that has a published version it
compares what the server publishes of the upstream with what its draft now has (``versions.diff``):

- the upstream's first sync approves what it imported: nothing is held, and a server whose edits wait for
  publication (``review_edits``) publishes it at once (source ``upstream``; the others publish on edit anyway);
- ``publish``: the same at every sync;
- ``hold`` and ``block``: each difference is one pending ``CatalogChange`` of the server (added, changed, removed;
  a renamed entry is a removal and an addition). A pending row seen again is touched (``seen_at``); one whose
  upstream definition changed again is ``superseded`` by a new row; one whose entry went back to its published
  definition is ``reverted``. A tool or prompt renamed on its row is the tenant's edit (its prefix), never held.
  The server goes on serving the published definitions (``block``: without the
  changed entries) until a publish of its draft approves them (``versions.publish``: one concept, not two).

A rollback (a version that republishes an earlier one) is followed, after commit, by ``hold_again``: what the
draft has of a held upstream beyond the version rolled back to is pending again.

Each newly held change is announced after commit: one line on ``mcp_app.audit`` and, when the tenant has an
alert webhook, a ``catalog.change_held`` POST (``alert_hooks``). ``pending_changes_by_tenant`` is the gauge
``mcp_catalog_pending_changes{tenant}``, read from the database at each scrape. Not here: the resolver's rules,
publish and rollback (``catalog.versions``), the reading and writing of entries (``federation.sync``). Design:
docs/catalog-versions.md ("Upstream changes held for approval").
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Count, Q
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from .. import alert_hooks
from ..catalog import versions
from ..conf import mcp_settings
from ..events import publish_to_servers
from ..models import CatalogChange, CatalogVersion, McpServer, Upstream
from ..models.upstreams import upstream_synced
from ..protocol.messages import list_changed

audit = logging.getLogger("mcp_app.audit")
Entry = dict[str, Any]
#: The ``list_changed`` notification of each list of a version (templates are listed with resources).
NOTIFIED = {"tools": "tools", "resources": "resources", "resourceTemplates": "resources", "prompts": "prompts"}


@receiver(upstream_synced, dispatch_uid="mcp_app.catalog.drift")
def after_sync(sender: Any, upstream: Upstream, servers: Iterable[int], **kwargs: Any) -> list[CatalogChange]:
    """Hold or publish what the sync of ``upstream`` changed on each of ``servers`` (see the module docstring);
    the pending changes it recorded anew. Runs inside the sync's transaction."""
    first = upstream.last_synced_at is None  # its first sync approves what it imported
    ids = set(servers) | set(
        CatalogChange.objects.pending().filter(upstream=upstream).values_list("server_id", flat=True)
    )
    published = McpServer.objects.filter(pk__in=ids, tenant_id=upstream.tenant_id, published_version__isnull=False)
    held: list[CatalogChange] = []
    for server in published.order_by("pk"):
        if first or upstream.on_change == Upstream.OnChange.PUBLISH:
            if server.review_edits:
                approve(server, upstream)
        else:
            held.extend(hold(server, upstream))
    return held


def hold(server: McpServer, upstream: Upstream) -> list[CatalogChange]:
    """Record as pending changes of ``server`` how its draft differs from what it publishes of ``upstream`` (see
    the module docstring); announce the new ones after commit. The pending changes recorded anew."""
    created, moved = _hold(server, upstream)
    if upstream.on_change == Upstream.OnChange.BLOCK:
        # What the server serves changed without a publication (entries left out, or back): say so.
        for kind in sorted({NOTIFIED[name] for name in moved}):
            publish_to_servers({server.pk}, list_changed(kind))
    if created:
        transaction.on_commit(functools.partial(_announce, upstream, created))
    return created


@receiver(post_save, sender=CatalogVersion, dispatch_uid="mcp_app.catalog.drift.rollback")
def _republished(sender: Any, instance: CatalogVersion, created: bool = False, **kwargs: Any) -> None:
    """A rollback may publish an upstream's entry as it was before a change the draft still has: once it is the
    published version (after commit), the difference is held again, so no later publication of edits serves the
    upstream's newer definition unapproved."""
    if created and instance.rolled_back_to is not None:
        transaction.on_commit(functools.partial(hold_again, instance.server_id))


def hold_again(server_pk: int) -> list[CatalogChange]:
    """Hold, on the server ``server_pk``, what differs from its published version for each upstream it exposes
    whose changes are held (``hold``, ``block``)."""
    with transaction.atomic():
        server = McpServer.objects.filter(pk=server_pk, published_version__isnull=False).first()
        if server is None:
            return []
        entries = (*versions.draft_entries(server), *versions.published_entries(server))
        exposed = {entry["upstream"] for entry in entries if entry.get("upstream") is not None}
        upstreams = (
            Upstream.objects.filter(pk__in=exposed, tenant_id=server.tenant_id, last_synced_at__isnull=False)
            .exclude(on_change=Upstream.OnChange.PUBLISH)
            .select_related("tenant")
            .order_by("pk")
        )
        return [change for upstream in upstreams for change in hold(server, upstream)]


def _ours(entries: list[Entry], upstream: Upstream) -> list[Entry]:
    return [entry for entry in entries if entry.get("upstream") == upstream.pk]


def approve(server: McpServer, upstream: Upstream) -> CatalogVersion:
    """Publish on ``server`` what its draft has of ``upstream``, and of the rest what it publishes now: the
    upstream's entries in their draft places, the server's other unpublished edits left waiting. Publishing the
    same content again writes nothing."""
    published, draft = versions.published_entries(server), versions.draft_entries(server)
    approved = {(entry["list"], entry["ref"]): entry for entry in published if entry.get("upstream") != upstream.pk}
    entries = [
        entry if entry.get("upstream") == upstream.pk else approved.pop((entry["list"], entry["ref"]))
        for entry in draft
        if entry.get("upstream") == upstream.pk or (entry["list"], entry["ref"]) in approved
    ]
    entries.extend(approved.values())  # published, gone from the draft: its removal waits for a publish
    return versions.publish(server, entries=entries, source=CatalogVersion.Source.UPSTREAM)


def _hold(server: McpServer, upstream: Upstream) -> tuple[list[CatalogChange], set[str]]:
    """The pending changes recorded anew on ``server``, and the lists whose pending changes came or went."""
    published = _ours(versions.published_entries(server), upstream)
    draft = _ours(versions.draft_entries(server), upstream)
    refs = {(entry["list"], versions.entry_key(entry)): entry["ref"] for entry in draft}
    pending = {
        (row.list_name, row.key): row
        for row in CatalogChange.objects.pending().filter(server=server, upstream=upstream)
    }
    now = timezone.now()
    created: list[CatalogChange] = []
    for change in versions.diff(published, draft):
        if _renamed_by_its_prefix(change):
            continue  # the tenant's own edit: published as its other edits are
        row = pending.pop((change.list_name, change.key), None)
        if row is not None and (row.change, row.old, row.new) == (change.change, change.old, change.new):
            row.save(update_fields=["seen_at"])  # seen again, still pending
            continue
        if row is not None:  # the upstream changed it again: a new definition to approve
            row.status, row.resolved_at = CatalogChange.Status.SUPERSEDED, now
            row.save(update_fields=["status", "resolved_at", "seen_at"])
        created.append(
            CatalogChange.objects.create(
                tenant_id=server.tenant_id,
                server=server,
                upstream=upstream,
                list_name=change.list_name,
                key=change.key,
                ref=refs.get((change.list_name, change.key)),
                change=change.change,
                old=change.old,
                new=change.new,
            )
        )
    for row in pending.values():  # back to the published definition
        row.status, row.resolved_at = CatalogChange.Status.REVERTED, now
        row.save(update_fields=["status", "resolved_at", "seen_at"])
    return created, {row.list_name for row in (*created, *pending.values())}


def _renamed_by_its_prefix(change: versions.EntryDiff) -> bool:
    """Whether ``change`` is a tool or prompt whose name alone changed on the same row: a sync finds its rows by
    their name upstream, so only the tenant's prefix (or a binding's exposed name) renames one; an upstream's
    rename is another row (a removal and an addition)."""
    return (
        change.change == "changed"
        and change.list_name in ("tools", "prompts")
        and [field.field for field in change.fields] == ["name"]
    )


def _announce(upstream: Upstream, held: list[CatalogChange]) -> None:
    """After commit: log each held change on ``mcp_app.audit`` and send it to the tenant's alert webhook."""
    tenant = upstream.tenant.slug
    for row in held:
        audit.info(
            "upstream change held: tenant %s, server %s, upstream %s (%s), %s %s entry %r",
            tenant, row.server.server_id, upstream.name, upstream.on_change, row.change, row.list_name, row.key,
        )  # fmt: skip
        payload = {
            "type": "catalog.change_held",
            "id": row.pk,
            "tenant": tenant,
            "server": row.server.server_id,
            "upstream": upstream.name,
            "onChange": upstream.on_change,
            "list": row.list_name,
            "key": row.key,
            "change": row.change,
            "old": row.old,
            "new": row.new,
            "firstSeenAt": row.first_seen_at.isoformat().replace("+00:00", "Z"),
        }
        alert_hooks.worker.schedule(0.0, functools.partial(alert_hooks.send, upstream.tenant_id, payload))


def pending_changes_by_tenant() -> dict[str, int]:
    """The value of ``mcp_catalog_pending_changes`` per tenant label, from the database: each tenant that ever held
    a change (0 once none is pending), the most pending first, past ``USAGE_METRICS_MAX_TENANTS`` summed as
    ``other``."""
    rows = (
        CatalogChange.objects.values("tenant__slug")
        .annotate(pending=Count("pk", filter=Q(status=CatalogChange.Status.PENDING)))
        .order_by("-pending", "tenant__slug")
    )
    limit = int(mcp_settings.USAGE_METRICS_MAX_TENANTS)
    counts: dict[str, int] = {}
    for position, row in enumerate(rows):
        label = row["tenant__slug"] if position < limit else "other"
        counts[label] = counts.get(label, 0) + row["pending"]
    return counts
