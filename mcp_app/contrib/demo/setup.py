"""Idempotent creation of the demo tenant, server, agent and tool bindings, plus a fresh token."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.apps import apps
from django.db import transaction

from mcp_app.models import Agent, AgentToken, McpServer, ServerTool, Tenant, Tool
from mcp_app.protocol.versions import MODERN_VERSIONS

DEMO_TOOLS = ("echo", "add", "get_time", "progress_demo")
DEMO_INSTRUCTIONS = (
    "Demo server of mcp-host. Tools: echo (returns text), add (sums two numbers), get_time (current UTC time), "
    "progress_demo (reports progress)."
)


@dataclass(frozen=True)
class DemoAccess:
    url: str
    server_id: str
    agent_id: str
    token: str

    def as_dict(self) -> dict[str, str]:
        return {"url": self.url, "server_id": self.server_id, "agent_id": self.agent_id, "token": self.token}


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


@transaction.atomic
def ensure_demo(base_url: str) -> DemoAccess:
    """The demo tenant with two servers exposing the demo tools: ``demo`` (every revision) and
    ``demo-modern`` (2026-07-28 only), plus, when ``mcp_app.contrib.conformance`` is installed, its
    ``conformance`` server (allowing ``base_url``'s origin); an agent allowed on all, and a fresh token for it."""
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
    _token, raw = AgentToken.objects.issue_token(agent, servers=servers, name="mcp_demo")
    url = f"{base_url.rstrip('/')}/mcp/{server.server_id}?agentId={agent.agent_id}"
    return DemoAccess(url=url, server_id=server.server_id, agent_id=agent.agent_id, token=raw)
