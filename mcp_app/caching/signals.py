"""Every saved or deleted tenant, agent, token, server, session, upstream or budget, and every change of a token's server
scope or grant, publishes the invalidation keys of the cached snapshots it affects (``mcp_app.invalidation``).

Queryset ``update()`` and ``delete()`` send no signals: the manager verbs that use them publish themselves
(``McpServer.objects.bump_catalog_version``, ``AgentTokenQuerySet.revoke``, ``McpSession.terminate``…).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from django.db.models.signals import m2m_changed, post_delete, post_save

from ..invalidation import publish
from ..models import Agent, AgentToken, Budget, McpServer, McpSession, Tenant, Upstream

#: The invalidation key a saved or deleted row publishes, and whether a new row publishes it too (tenants and
#: agents do; nothing can have cached a token, server, session or upstream that did not exist). An upstream's
#: key also closes every process's pooled connections to it (``federation.pool``).
ROW_KEYS: dict[type[Model], tuple[str, bool]] = {
    Tenant: ("tenant", True),
    Agent: ("agent", True),
    AgentToken: ("token", False),
    McpServer: ("server", False),
    McpSession: ("session", False),
    Upstream: ("upstream", False),
}


def _row_changed(sender: Any, instance: Model, created: bool = False, **kwargs: Any) -> None:
    key, when_created = ROW_KEYS[sender]
    if when_created or not created:
        publish(f"{key}:{instance.pk}")


for _model in ROW_KEYS:
    for _signal in (post_save, post_delete):
        _signal.connect(_row_changed, sender=_model, dispatch_uid=f"mcp-row-{_model._meta.model_name}")


def _budget_changed(sender: Any, instance: Budget, **kwargs: Any) -> None:
    """A budget is part of the snapshot of every token it applies to: its tenant's (or only its agent's)."""
    publish(f"tenant:{instance.tenant_id}" if instance.agent_id is None else f"agent:{instance.agent_id}")


for _signal in (post_save, post_delete):
    _signal.connect(_budget_changed, sender=Budget, dispatch_uid="mcp-row-budget")


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
        linked = sender.objects.filter(**{column: instance}).values_list("agenttoken_id", flat=True)
        publish(*(f"token:{pk}" for pk in linked))
    elif action in ("post_add", "post_remove"):
        publish(*(f"token:{pk}" for pk in pk_set or ()))


for _link in (AgentToken.servers, AgentToken.granted_tools, AgentToken.granted_resources, AgentToken.granted_prompts):
    m2m_changed.connect(_token_links_changed, sender=_link.through, dispatch_uid=f"mcp-token-links-{_link.field.name}")
