"""``manage.py mcp_bootstrap``: a first tenant, server, agent and token in one idempotent command.

Run it again and nothing is duplicated; the token is printed only when one is issued (the first run, or
``--rotate``, which revokes the previous bootstrap token). ``--json`` prints one object for scripts.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import CommandParser

from mcp_app.operations import bootstrap

from ..base import OperationCommand


class Command(OperationCommand):
    help = "Create (idempotently) a tenant, an MCP server exposing some @tools, an agent and a token for it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", default="default", help="Tenant slug (default: default).")
        parser.add_argument("--tenant-name", help="Tenant display name, when it is created.")
        parser.add_argument("--server", default="main", help="Server id, the /mcp/<server> path (default: main).")
        parser.add_argument("--agent", default="agent", help="Agent id, the ?agentId= value (default: agent).")
        parser.add_argument(
            "--tool", action="append", default=[], dest="tools", help="A registered @tool to expose (repeatable)."
        )
        parser.add_argument("--token-name", default="bootstrap", help="Name of the token (default: bootstrap).")
        parser.add_argument("--rotate", action="store_true", help="Revoke the existing token and issue a new one.")
        parser.add_argument(
            "--base-url",
            default=os.environ.get("MCP_PUBLIC_URL", "http://127.0.0.1:8000"),
            help="Public base URL, for the printed MCP URL (default: $MCP_PUBLIC_URL or http://127.0.0.1:8000).",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object and nothing else.")

    def run(self, options: dict[str, Any]) -> None:
        result = bootstrap(
            tenant_slug=options["tenant"],
            tenant_name=options["tenant_name"],
            server_id=options["server"],
            agent_id=options["agent"],
            tools=options["tools"],
            token_name=options["token_name"],
            rotate=options["rotate"],
        )
        url = f"{options['base_url'].rstrip('/')}/mcp/{result.server.server_id}?agentId={result.agent.agent_id}"
        if self.emit(
            options,
            {
                "url": url,
                "tenant": result.tenant.slug,
                "server_id": result.server.server_id,
                "agent_id": result.agent.agent_id,
                "token": result.raw_token,
                "token_prefix": result.token.prefix,
                "created": result.created,
            },
        ):
            return
        self.stdout.write(f"Created: {', '.join(result.created)}" if result.created else "Everything already existed.")
        self.stdout.write(f"  MCP URL : {url}")
        if result.raw_token is not None:
            self.stdout.write(f"  Token   : {result.raw_token}")
            self.stdout.write("The token is shown only this once; it is stored as a digest.")
        else:
            self.stdout.write(
                f"  Token   : mcp_{result.token.prefix}_… (issued before, not shown again; --rotate for a new one)"
            )
