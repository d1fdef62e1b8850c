"""``manage.py mcp_demo``: ensure the demo tenant/server/agent exist and print a fresh token to connect with."""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from mcp_app.contrib.demo.setup import ensure_demo


class Command(BaseCommand):
    help = "Create (idempotently) the demo tenant, MCP server and agent, and issue a fresh agent token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object and nothing else.")
        parser.add_argument(
            "--base-url",
            default=os.environ.get("MCP_PUBLIC_URL", "http://127.0.0.1:8000"),
            help="Public base URL of this deployment (default: $MCP_PUBLIC_URL or http://127.0.0.1:8000).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        access = ensure_demo(options["base_url"])
        if options["json"]:
            self.stdout.write(json.dumps(access.as_dict()))
            return
        self.stdout.write(
            "\n".join(
                [
                    "mcp-host demo is ready.",
                    f"  MCP URL : {access.url}",
                    f"  Agent id: {access.agent_id}",
                    f"  Token   : {access.token}",
                    f"  Also    : {access.url.replace('/mcp/demo?', '/mcp/demo-modern?')}  (2026-07-28 only)",
                    "Connect with header  Authorization: Bearer <token>  (the token is shown only once).",
                ]
            )
        )
