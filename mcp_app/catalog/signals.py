"""Keep catalog versions current: every edit of a tool or a binding bumps the affected servers' versions.

Deleting a tool cascades to its bindings, whose own ``post_delete`` bumps their servers, so tool deletion
needs no receiver of its own.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from ..models import McpServer, ServerTool, Tool


@receiver(post_save, sender=ServerTool)
@receiver(post_delete, sender=ServerTool)
def _binding_changed(sender: type[ServerTool], instance: ServerTool, **kwargs: Any) -> None:
    McpServer.objects.bump_catalog_version({instance.server_id})


@receiver(post_save, sender=Tool)
def _tool_saved(sender: type[Tool], instance: Tool, **kwargs: Any) -> None:
    server_ids = set(ServerTool.objects.filter(tool=instance).values_list("server_id", flat=True))
    McpServer.objects.bump_catalog_version(server_ids)
