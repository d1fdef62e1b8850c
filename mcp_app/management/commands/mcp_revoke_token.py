"""``manage.py mcp_revoke_token``: revoke tokens of a tenant by prefix, agent or name (criteria combine)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from mcp_app.operations import tokens_to_revoke

from ..base import OperationCommand


class Command(OperationCommand):
    help = "Revoke a tenant's tokens matching a prefix (mcp_<prefix>_…), an agent and/or a token name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--prefix", help="The 8 hex characters after mcp_ (or the whole mcp_<prefix>_ part).")
        parser.add_argument("--agent", help="Agent id: its tokens.")
        parser.add_argument("--name", help="Token name.")
        parser.add_argument("--all", action="store_true", help="Revoke every match, even more than one.")

    def run(self, options: dict[str, Any]) -> None:
        tokens = tokens_to_revoke(
            options["tenant"], prefix=options["prefix"], agent_id=options["agent"], name=options["name"]
        )
        revoked = self.revoke(tokens, "token", options["all"], "the criteria")
        self.stdout.write(f"Revoked {revoked} token(s).")
