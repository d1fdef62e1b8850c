"""Operator verbs behind the management commands: bootstrap a tenant, issue, find and revoke tokens.

The commands (``mcp_bootstrap``, ``mcp_issue_token``, ``mcp_revoke_token``, ``mcp_catalog``) only parse
arguments and print; what they do lives here so that projects can call it from their own code, and so that the
rules (idempotence, raw tokens shown once, tenant scoping of every lookup) are stated once.

Every lookup is scoped by tenant slug: an agent id or server id is only meaningful within its tenant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from .definitions.registry import registry
from .models import Agent, AgentToken, McpServer, ServerTool, Tenant, Tool


class OperationError(Exception):
    """A request an operator can fix (unknown name, ambiguous prefix, unregistered tool)."""


@dataclass
class BootstrapResult:
    tenant: Tenant
    server: McpServer
    agent: Agent
    token: AgentToken
    raw_token: str | None  # None when an existing token was kept (its value cannot be shown again)
    created: list[str] = field(default_factory=list)


@transaction.atomic
def bootstrap(
    *,
    tenant_slug: str,
    server_id: str,
    agent_id: str,
    tools: list[str] | tuple[str, ...] = (),
    tenant_name: str | None = None,
    token_name: str = "bootstrap",  # noqa: S107  (a label, not a secret)
    rotate: bool = False,
) -> BootstrapResult:
    """Ensure a tenant, a server exposing ``tools`` (registered ``@tool`` names), an agent and a token.

    Idempotent: what exists is kept (tools missing from the server are appended). A usable token named
    ``token_name`` of the agent is kept and its raw value is not shown again (``raw_token`` is ``None``);
    ``rotate=True`` revokes it and issues a new one. A fresh token is scoped to the server.
    """
    unknown = [name for name in tools if registry.get(name) is None]
    if unknown:
        raise OperationError(f"no @tool registered as {', '.join(unknown)}; registered: {', '.join(registry.names())}")
    created: list[str] = []
    tenant, made = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_name or tenant_slug})
    if made:
        created.append(f"tenant {tenant_slug}")
    server = McpServer.objects.filter(server_id=server_id).first()
    if server is None:
        server = McpServer.objects.create(tenant=tenant, server_id=server_id, name=server_id)
        created.append(f"server {server_id}")
    elif server.tenant_id != tenant.pk:
        raise OperationError(f"the server id {server_id!r} belongs to another tenant")
    # The operator runs this command, so the tools it binds are the ones the operator allows the tenant.
    tenant.allow_python_tools(tools)
    position = ServerTool.objects.filter(server=server).count()
    for name in tools:
        tool, made = Tool.objects.get_or_create(
            tenant=tenant, name=name, defaults={"kind": Tool.Kind.PYTHON, "python_name": name}
        )
        if made:
            created.append(f"tool {name}")
        if not ServerTool.objects.filter(server=server, tool=tool).exists():
            ServerTool.objects.create(server=server, tool=tool, position=position)
            position += 1
    agent, made = Agent.objects.get_or_create(tenant=tenant, agent_id=agent_id, defaults={"name": agent_id})
    if made:
        created.append(f"agent {agent_id}")
    existing = AgentToken.objects.usable().filter(agent=agent, name=token_name).order_by("-created_at").first()
    if existing is not None and not rotate:
        return BootstrapResult(tenant, server, agent, existing, None, created)
    if existing is not None:
        revoke_tokens(AgentToken.objects.usable().filter(agent=agent, name=token_name))
    token, raw = AgentToken.objects.issue_token(agent, servers=[server], name=token_name)
    created.append(f"token {token.prefix}")
    return BootstrapResult(tenant, server, agent, token, raw, created)


def find_agent(tenant_slug: str, agent_id: str) -> Agent:
    agent = Agent.objects.select_related("tenant").filter(tenant__slug=tenant_slug, agent_id=agent_id).first()
    if agent is None:
        raise OperationError(f"no agent {agent_id!r} in tenant {tenant_slug!r}")
    return agent


def find_server(tenant_slug: str, server_id: str) -> McpServer:
    server = McpServer.objects.select_related("tenant").filter(tenant__slug=tenant_slug, server_id=server_id).first()
    if server is None:
        raise OperationError(f"no server {server_id!r} in tenant {tenant_slug!r}")
    return server


def issue_token(
    tenant_slug: str, agent_id: str, server_ids: list[str], *, name: str = "", expires_at: datetime | None = None
) -> tuple[AgentToken, str]:
    """A new token of the tenant's agent, scoped to the tenant's ``server_ids`` (at least one)."""
    if not server_ids:
        raise OperationError("name at least one server the token may call")
    agent = find_agent(tenant_slug, agent_id)
    servers = [find_server(tenant_slug, server_id) for server_id in server_ids]
    if expires_at is not None and expires_at <= timezone.now():
        raise OperationError("the expiry is in the past")
    return AgentToken.objects.issue_token(agent, servers=servers, name=name, expires_at=expires_at)


def revoke_tokens(tokens: QuerySet[AgentToken]) -> int:
    """Revoke every unrevoked token of ``tokens`` one by one (``AgentToken.revoke``, so that signals and cache
    invalidation see each change); returns how many were revoked."""
    revoked = 0
    for token in tokens.filter(revoked_at__isnull=True):
        token.revoke()
        revoked += 1
    return revoked


def tokens_to_revoke(
    tenant_slug: str, *, prefix: str | None = None, agent_id: str | None = None, name: str | None = None
) -> QuerySet[AgentToken]:
    """The tenant's unrevoked tokens matching every given criterion (at least one is required)."""
    if prefix is None and agent_id is None and name is None:
        raise OperationError("name a token prefix, an agent or a token name")
    tokens = AgentToken.objects.filter(agent__tenant__slug=tenant_slug, revoked_at__isnull=True)
    if prefix is not None:
        tokens = tokens.filter(prefix=prefix.removeprefix("mcp_").rstrip("_…").lower())
    if agent_id is not None:
        tokens = tokens.filter(agent__agent_id=agent_id)
    if name is not None:
        tokens = tokens.filter(name=name)
    return tokens
