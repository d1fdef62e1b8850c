"""``manage.py mcp_demo``: ensure the demo tenant/server/agent exist and print the demo token to connect with.

With ``--token-file`` (what ``make run`` passes) the token is kept in that file (mode 0600) and reused while it
works, else earlier demo tokens are revoked and a new one issued. The last line is ``export TOKEN=…``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from mcp_app.contrib.demo.setup import ensure_demo


class Command(BaseCommand):
    help = "Create (idempotently) the demo tenant, MCP server and agent, and print its one live agent token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object and nothing else.")
        parser.add_argument(
            "--base-url",
            default=os.environ.get("MCP_PUBLIC_URL", "http://127.0.0.1:8000"),
            help="Public base URL of this deployment (default: $MCP_PUBLIC_URL or http://127.0.0.1:8000).",
        )
        parser.add_argument(
            "--token-file",
            type=Path,
            help="Keep the token in this file and reuse it on later runs while it still works.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        token_file: Path | None = options["token_file"]
        previous = None
        if token_file is not None and token_file.is_file():
            previous = token_file.read_text().strip() or None
        access = ensure_demo(options["base_url"], reuse=previous)
        if token_file is not None and access.token != previous:
            token_file.touch(mode=0o600)
            token_file.chmod(0o600)
            token_file.write_text(access.token + "\n")
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
                    "OAuth clients (Claude, ChatGPT, VS Code, Cursor, MCP Inspector; docs/oauth.md):",
                    f"  URL     : {access.oauth_url}",
                    f"  Sign in : {access.username} / "
                    + (
                        f"{access.password}  (shown this once; reset with manage.py changepassword {access.username})"
                        if access.password
                        else f"(password shown when created; reset with manage.py changepassword {access.username})"
                    ),
                    "Connect with header  Authorization: Bearer <token>; paste this line into your shell:",
                    f"export TOKEN={access.token}",
                ]
            )
        )
