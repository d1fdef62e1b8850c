"""Idempotent creation of the demo tenant, server, agent and tool bindings, plus its one live token.

``ensure_demo`` keeps the ``mcp_demo`` token it is handed back (``reuse``) while that still authenticates as the
demo agent, and otherwise revokes every earlier one before issuing a new one: reruns leave no trail of live tokens.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import transaction

from mcp_app.models import Agent, AgentToken, McpServer, ServerTool, Tenant, TenantMembership, Tool
from mcp_app.protocol.versions import MODERN_VERSIONS

DEMO_TOOLS = ("echo", "add", "get_time", "progress_demo", "countdown")
DEMO_INSTRUCTIONS = (
    "Demo server of mcp-host. Tools: echo (returns text), add (sums two numbers), get_time (current UTC time), "
    "progress_demo (reports progress), countdown (a long call on a worker: progress, cancellation, tasks)."
)


DEMO_USERNAME = "demo"


@dataclass(frozen=True)
class DemoAccess:
    url: str
    server_id: str
    agent_id: str
    token: str
    # OAuth: the URL an OAuth client needs (no agentId), and the demo person who signs in and consents. The
    # password is known only when this run created the user (it is printed once, never stored in clear).
    oauth_url: str = ""
    username: str = DEMO_USERNAME
    password: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "server_id": self.server_id,
            "agent_id": self.agent_id,
            "token": self.token,
            "oauth": {"url": self.oauth_url, "username": self.username, "password": self.password},
        }


def _demo_user(tenant: Tenant) -> str | None:
    """The demo person, a member of the demo tenant who may consent for OAuth clients; the password when this
    call created the user, else ``None``."""
    users = get_user_model()
    user = users.objects.filter(username=DEMO_USERNAME).first()
    password = None
    if user is None:
        password = secrets.token_urlsafe(12)
        user = users.objects.create_user(username=DEMO_USERNAME, password=password)
    TenantMembership.objects.get_or_create(tenant=tenant, user=user, defaults={"role": TenantMembership.Role.VIEWER})
    return password


def _ensure_server(tenant: Tenant, server_id: str, **defaults: object) -> McpServer:
    server, _ = McpServer.objects.get_or_create(server_id=server_id, defaults={"tenant": tenant, **defaults})
    if server.tenant_id != tenant.pk:
        raise RuntimeError(f"the server id {server_id!r} is taken by another tenant")
    for position, name in enumerate(DEMO_TOOLS):
        tool, _ = Tool.objects.get_or_create(
            tenant=tenant, name=name, defaults={"kind": Tool.Kind.PYTHON, "python_name": name}
        )
        ServerTool.objects.get_or_create(server=server, tool=tool, defaults={"position": position})
    return server


DEMO_TOKEN_NAME = "mcp_demo"  # noqa: S105  (a label, not a secret)


def _demo_token(agent: Agent, servers: list[McpServer], reuse: str | None) -> str:
    token = AgentToken.objects.authenticate(reuse.strip()) if reuse else None
    if token is not None and (token.agent_id != agent.pk or token.name != DEMO_TOKEN_NAME):
        token = None  # a live token, but not the demo agent's demo token: left alone, and a new one issued
    stale = AgentToken.objects.usable().filter(agent=agent, name=DEMO_TOKEN_NAME)
    (stale.exclude(pk=token.pk) if token is not None else stale).revoke()
    if token is not None and reuse:
        token.servers.set(servers)
        return reuse.strip()
    _token, raw = AgentToken.objects.issue_token(agent, servers=servers, name=DEMO_TOKEN_NAME)
    return raw


@transaction.atomic
def ensure_demo(base_url: str, reuse: str | None = None) -> DemoAccess:
    """The demo tenant with the demo tools on ``demo`` (every revision) and ``demo-modern`` (2026-07-28 only), and the
    conformance server when that app is installed (allowing ``base_url``'s origin); an agent allowed on all, and its
    one live token (``reuse`` while it is the demo agent's live demo token, else a new one; earlier ones revoked)."""
    tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
    tenant.allow_python_tools(DEMO_TOOLS)
    server = _ensure_server(tenant, "demo", name="demo", title="mcp-host demo", instructions=DEMO_INSTRUCTIONS)
    modern = _ensure_server(
        tenant,
        "demo-modern",
        name="demo-modern",
        title="mcp-host demo (2026-07-28 only)",
        instructions=DEMO_INSTRUCTIONS,
        protocol_versions=list(MODERN_VERSIONS),
    )
    servers = [server, modern]
    if apps.is_installed("mcp_app.contrib.conformance"):
        from mcp_app.contrib.conformance.setup import ensure_conformance

        parts = urlsplit(base_url)
        servers.append(ensure_conformance(extra_origins=[f"{parts.scheme}://{parts.netloc}"]))
    agent, _ = Agent.objects.get_or_create(tenant=tenant, agent_id="demo-agent", defaults={"name": "Demo agent"})
    raw = _demo_token(agent, servers, reuse)
    url = f"{base_url.rstrip('/')}/mcp/{server.server_id}?agentId={agent.agent_id}"
    return DemoAccess(
        url=url,
        server_id=server.server_id,
        agent_id=agent.agent_id,
        token=raw,
        oauth_url=f"{base_url.rstrip('/')}/mcp/{server.server_id}",
        password=_demo_user(tenant),
    )
