"""Every saved or deleted tenant, agent, token, server, session or upstream, and every change of a token's server
scope or grant, publishes the invalidation keys of the cached snapshots it affects (``mcp_app.invalidation``).

Queryset ``update()`` and ``delete()`` send no signals: the manager verbs that use them
(``McpServer.objects.bump_catalog_version``, ``AgentTokenQuerySet.revoke``, ``McpSession.terminate``…) publish
themselves; other code must call ``invalidation.publish`` (or rely on ``IDENTITY_CACHE_MAX_AGE_SECONDS``).
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from ..invalidation import publish
from ..models import Agent, AgentToken, McpServer, McpSession, Tenant, Upstream


@receiver(post_save, sender=Tenant)
@receiver(post_delete, sender=Tenant)
def _tenant_changed(sender: Any, instance: Tenant, **kwargs: Any) -> None:
    publish(f"tenant:{instance.pk}")


@receiver(post_save, sender=Agent)
@receiver(post_delete, sender=Agent)
def _agent_changed(sender: Any, instance: Agent, **kwargs: Any) -> None:
    publish(f"agent:{instance.pk}")


@receiver(post_save, sender=AgentToken)
@receiver(post_delete, sender=AgentToken)
def _token_changed(sender: Any, instance: AgentToken, created: bool = False, **kwargs: Any) -> None:
    if not created:  # nothing can have cached a token that did not exist
        publish(f"token:{instance.pk}")


def _token_links_changed(sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any) -> None:
    """A token's server scope or grant (its links to servers, tools, resources, prompts) changed, from either
    side: every affected token's snapshot goes."""
    if not reverse:
        if action.startswith("post_"):
            publish(f"token:{instance.pk}")
    elif action == "pre_clear":  # e.g. server.tokens.clear(): afterwards nothing says which tokens were linked
        column = next(
            field.name for field in sender._meta.fields if field.is_relation and field.related_model is type(instance)
        )
        publish(
            *(
                f"token:{pk}"
                for pk in sender.objects.filter(**{column: instance}).values_list("agenttoken_id", flat=True)
            )
        )
    elif action in ("post_add", "post_remove"):
        publish(*(f"token:{pk}" for pk in pk_set or ()))


for _link in (AgentToken.servers, AgentToken.granted_tools, AgentToken.granted_resources, AgentToken.granted_prompts):
    m2m_changed.connect(_token_links_changed, sender=_link.through, dispatch_uid=f"mcp-token-links-{_link.field.name}")


@receiver(post_save, sender=McpServer)
@receiver(post_delete, sender=McpServer)
def _server_changed(sender: Any, instance: McpServer, created: bool = False, **kwargs: Any) -> None:
    if not created:
        publish(f"server:{instance.pk}")


@receiver(post_save, sender=McpSession)
@receiver(post_delete, sender=McpSession)
def _session_changed(sender: Any, instance: McpSession, created: bool = False, **kwargs: Any) -> None:
    if not created:
        publish(f"session:{instance.pk}")


@receiver(post_save, sender=Upstream)
@receiver(post_delete, sender=Upstream)
def _upstream_changed(sender: Any, instance: Upstream, created: bool = False, **kwargs: Any) -> None:
    # Edited, disabled or deleted: every process closes its pooled connections to it (``federation.pool``).
    if not created:
        publish(f"upstream:{instance.pk}")
