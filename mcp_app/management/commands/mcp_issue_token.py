"""``manage.py mcp_issue_token``: a new token for an agent, scoped to named servers of its tenant."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from mcp_app.operations import OperationError, issue_token


class Command(BaseCommand):
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

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["expires_in_days"]
        expires_at = timezone.now() + timedelta(days=days) if days is not None else None
        try:
            token, raw = issue_token(
                options["tenant"], options["agent"], options["servers"], name=options["name"], expires_at=expires_at
            )
        except OperationError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            expiry = token.expires_at.isoformat() if token.expires_at else None
            self.stdout.write(json.dumps({"token": raw, "prefix": token.prefix, "expires_at": expiry}))
            return
        self.stdout.write(raw)
        self.stderr.write(f"Issued mcp_{token.prefix}_… (shown only this once; revoke with mcp_revoke_token).")
