"""``manage.py mcp_catalog``: a server's catalog resolved as the endpoint resolves it; with ``--agent``, as that
agent sees it (refused when none of its usable tokens is scoped to the server); ``--json`` prints the wire lists.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import AgentToken
from mcp_app.operations import find_agent, find_server

from ..base import OperationCommand

KINDS = (
    ("tools", "Tools"),
    ("resources", "Resources"),
    ("resourceTemplates", "Resource templates"),
    ("prompts", "Prompts"),
)


class Command(OperationCommand):
    help = "Show a server's effective catalog (tools, resources, templates, prompts), optionally for one agent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--server", required=True, help="Server id.")
        parser.add_argument("--agent", help="Agent id: check it may call the server and show what it sees.")
        parser.add_argument("--json", action="store_true", help="Print the wire lists as one JSON object.")

    def run(self, options: dict[str, Any]) -> None:
        server = find_server(options["tenant"], options["server"])
        agent = find_agent(options["tenant"], options["agent"]) if options["agent"] else None
        if agent is not None:
            if not agent.is_active:
                raise CommandError(f"agent {agent.agent_id!r} is inactive: its tokens do not authenticate")
            if not AgentToken.objects.usable().filter(agent=agent, servers=server).exists():
                raise CommandError(f"agent {agent.agent_id!r} has no usable token scoped to {server.server_id!r}")
        if not server.enabled or not server.tenant.is_active:
            self.stderr.write(f"Note: {server.server_id!r} is not served now (disabled, or its tenant is inactive).")
        catalog = resolve_catalog(server)
        wire = {kind: catalog.wire(kind) for kind, _title in KINDS}
        if self.emit(options, {"server": server.server_id, "catalog_version": server.catalog_version, **wire}):
            return
        who = f" for agent {agent.agent_id}" if agent is not None else ""
        self.stdout.write(
            f"{server.server_id} (tenant {server.tenant.slug}, catalog version {server.catalog_version}){who}"
        )
        for kind, title in KINDS:
            self.stdout.write(f"{title} ({len(wire[kind])}):")
            for item in wire[kind]:
                label = item.get("name") if kind in ("tools", "prompts") else item.get("uri") or item.get("uriTemplate")
                summary = item.get("title") or item.get("description") or ""
                self.stdout.write(f"  {label}" + (f"  {summary.splitlines()[0]}" if summary else ""))
