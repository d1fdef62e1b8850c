"""``manage.py mcp_issue_token``: a new token for an agent, scoped to named servers of its tenant."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from mcp_app.operations import issue_token

from ..base import OperationCommand, expiry, when


class Command(OperationCommand):
    help = "Issue a token for an agent, scoped to servers of its tenant; the raw token is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--agent", required=True, help="Agent id.")
        parser.add_argument(
            "--server", action="append", required=True, dest="servers", help="A server id it may call (repeatable)."
        )
        parser.add_argument("--name", default="", help="What the token is for.")
        parser.add_argument("--expires-in-days", type=float, help="Lifetime in days (default: no expiry).")
        parser.add_argument("--json", action="store_true", help="Print one JSON object and nothing else.")

    def run(self, options: dict[str, Any]) -> None:
        expires_at = expiry(options["expires_in_days"])
        token, raw = issue_token(
            options["tenant"], options["agent"], options["servers"], name=options["name"], expires_at=expires_at
        )
        if self.emit(options, {"token": raw, "prefix": token.prefix, "expires_at": when(token.expires_at)}):
            return
        self.stdout.write(raw)
        self.stderr.write(f"Issued mcp_{token.prefix}_… (shown only this once; revoke with mcp_revoke_token).")
