"""Keep catalog versions current: every edit of a catalog entry or binding bumps the affected servers'
versions and tells their live streams which list changed.

Deleting a catalog entry cascades to its bindings, whose own ``post_delete`` bumps their servers, so entry
deletion needs no receiver of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
from ..protocol.messages import list_changed, resource_updated


@on_catalog_change
def _announce(server_ids: Iterable[int], kinds: tuple[str, ...], updated_uri: str | None) -> None:
    """Tell the servers' live streams (after commit, through the channel layer) which lists changed."""
    for kind in kinds:
        publish_to_servers(server_ids, list_changed(kind))
    if updated_uri is not None:
        publish_to_servers(server_ids, resource_updated(updated_uri))


@receiver(post_save, sender=ServerTool)
@receiver(post_delete, sender=ServerTool)
def _tool_binding_changed(sender: type[ServerTool], instance: ServerTool, **kwargs: Any) -> None:
    McpServer.objects.bump_catalog_version({instance.server_id}, ("tools",))


@receiver(post_save, sender=Tool)
def _tool_saved(sender: type[Tool], instance: Tool, **kwargs: Any) -> None:
    server_ids = set(ServerTool.objects.filter(tool=instance).values_list("server_id", flat=True))
    McpServer.objects.bump_catalog_version(server_ids, ("tools",))


@receiver(post_save, sender=ServerPrompt)
@receiver(post_delete, sender=ServerPrompt)
def _prompt_binding_changed(sender: type[ServerPrompt], instance: ServerPrompt, **kwargs: Any) -> None:
    McpServer.objects.bump_catalog_version({instance.server_id}, ("prompts",))


@receiver(post_save, sender=Prompt)
def _prompt_saved(sender: type[Prompt], instance: Prompt, **kwargs: Any) -> None:
    server_ids = set(ServerPrompt.objects.filter(prompt=instance).values_list("server_id", flat=True))
    McpServer.objects.bump_catalog_version(server_ids, ("prompts",))


@receiver(post_save, sender=ServerResource)
@receiver(post_delete, sender=ServerResource)
def _resource_binding_changed(sender: type[ServerResource], instance: ServerResource, **kwargs: Any) -> None:
    McpServer.objects.bump_catalog_version({instance.server_id}, ("resources",))


@receiver(post_save, sender=Resource)
def _resource_saved(sender: type[Resource], instance: Resource, created: bool = False, **kwargs: Any) -> None:
    server_ids = set(ServerResource.objects.filter(resource=instance).values_list("server_id", flat=True))
    updated = None if created or instance.is_template else instance.uri
    McpServer.objects.bump_catalog_version(server_ids, ("resources",), updated_uri=updated)


@receiver(post_save, sender=Webhook)
@receiver(post_delete, sender=Webhook)
def _webhook_changed(sender: type[Webhook], instance: Webhook, **kwargs: Any) -> None:
    server_ids = set(ServerTool.objects.filter(tool_id=instance.tool_id).values_list("server_id", flat=True))
    McpServer.objects.bump_catalog_version(server_ids, ("tools",))


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
    kinds = (
        ("tools", ServerTool.objects.filter(tool__upstream=instance)),
        ("resources", ServerResource.objects.filter(resource__upstream=instance)),
        ("prompts", ServerPrompt.objects.filter(prompt__upstream=instance)),
    )
    for kind, bindings in kinds:
        McpServer.objects.bump_catalog_version(set(bindings.values_list("server_id", flat=True)), (kind,))
