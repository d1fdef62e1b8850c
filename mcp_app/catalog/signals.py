"""Keep catalogs current: every edit of a catalog entry or binding bumps the affected servers' catalog versions
(every process re-resolves them) and, once the transaction commits, publishes the edit on servers that do not
review edits (``versions.auto_publish``): the publication tells live streams which lists changed. A resource's
new content is announced (``resources/updated``) at once.

Deleting a catalog entry cascades to its bindings, whose own ``post_delete`` bumps their servers, so entry
deletion needs no receiver of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from ..events import publish_to_servers
from ..models import (
    McpServer,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    Tool,
    Upstream,
    Webhook,
)
from ..models.servers import on_catalog_change
from ..protocol.messages import resource_updated
from .versions import ensure_baseline, schedule_auto_publish


@on_catalog_change
def _announce(server_ids: Iterable[int], kinds: tuple[str, ...], updated_uri: str | None) -> None:
    """Publish the edit after commit (where edits are not reviewed); tell subscribers of an updated resource."""
    schedule_auto_publish(server_ids, kinds)
    if updated_uri is not None:
        publish_to_servers(server_ids, resource_updated(updated_uri))


# Each kind of entry: its binding model, the binding's field that names the entry, and the list it is in.
_KINDS: dict[type[Any], tuple[type[Any], str, str]] = {
    Tool: (ServerTool, "tool", "tools"),
    Resource: (ServerResource, "resource", "resources"),
    Prompt: (ServerPrompt, "prompt", "prompts"),
}
_BINDING_LISTS = {binding: kind for binding, _field, kind in _KINDS.values()}


def _servers_of(bindings: QuerySet[Any]) -> set[int]:
    return set(bindings.values_list("server_id", flat=True))


@receiver(post_save, sender=ServerTool)
@receiver(post_delete, sender=ServerTool)
@receiver(post_save, sender=ServerPrompt)
@receiver(post_delete, sender=ServerPrompt)
@receiver(post_save, sender=ServerResource)
@receiver(post_delete, sender=ServerResource)
def _binding_changed(sender: type[Any], instance: Any, **kwargs: Any) -> None:
    McpServer.objects.bump_catalog_version({instance.server_id}, (_BINDING_LISTS[sender],))


@receiver(post_save, sender=Tool)
@receiver(post_save, sender=Prompt)
@receiver(post_save, sender=Resource)
def _entry_saved(sender: type[Any], instance: Any, created: bool = False, **kwargs: Any) -> None:
    binding, field, kind = _KINDS[sender]
    # A resource's own content changed: subscribers of its URI are told it was updated.
    updated = instance.uri if sender is Resource and not created and not instance.is_template else None
    servers = _servers_of(binding.objects.filter(**{field: instance}))
    McpServer.objects.bump_catalog_version(servers, (kind,), updated_uri=updated)


@receiver(post_save, sender=Webhook)
@receiver(post_delete, sender=Webhook)
def _webhook_changed(sender: type[Webhook], instance: Webhook, **kwargs: Any) -> None:
    McpServer.objects.bump_catalog_version(_servers_of(ServerTool.objects.filter(tool_id=instance.tool_id)), ("tools",))


@receiver(post_save, sender=Tenant)
def _tenant_saved(sender: type[Tenant], instance: Tenant, created: bool = False, **kwargs: Any) -> None:
    # The operator's allow-list of Python tools shapes every catalog of the tenant.
    if not created:
        server_ids = set(McpServer.objects.filter(tenant=instance).values_list("pk", flat=True))
        McpServer.objects.bump_catalog_version(server_ids, ("tools",))


@receiver(post_save, sender=Upstream)
def _upstream_saved(sender: type[Upstream], instance: Upstream, created: bool = False, **kwargs: Any) -> None:
    # Its entries carry how to reach it (URL, credentials, enabled): every server exposing one re-resolves.
    if created:
        return
    for binding, field, kind in _KINDS.values():
        servers = _servers_of(binding.objects.filter(**{f"{field}__upstream": instance}))
        McpServer.objects.bump_catalog_version(servers, (kind,))


@receiver(post_save, sender=McpServer)
def _server_saved(sender: type[McpServer], instance: McpServer, **kwargs: Any) -> None:
    # A server that starts reviewing edits serves a version from then on: its draft now, if none is published.
    if instance.review_edits and instance.published_version_id is None:
        transaction.on_commit(lambda: ensure_baseline(instance))
