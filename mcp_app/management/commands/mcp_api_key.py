"""``manage.py mcp_api_key issue|revoke|list``: a user's personal API keys (``mcpk_…``) for the REST API.

``issue`` prints the raw key once (only its digest is stored); ``revoke`` revokes the matching key (several only
with ``--all``); ``list`` never shows a key. A key acts as its user, with the user's tenant roles.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from mcp_app.models import ApiKey
from mcp_app.operations import api_keys_to_revoke, find_user, issue_api_key

from ..base import OperationCommand, expiry, when


class Command(OperationCommand):
    help = "Issue (printed once), revoke or list a user's personal API keys."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="issue|revoke|list")
        issue = actions.add_parser("issue", help="A new key; the raw value is printed once.")
        issue.add_argument("--user", required=True, help="Username.")
        issue.add_argument("--name", default="", help="What the key is for.")
        issue.add_argument("--expires-in-days", type=float, help="Lifetime in days (default: no expiry).")
        issue.add_argument("--json", action="store_true", help="Print one JSON object and nothing else.")
        revoke = actions.add_parser("revoke", help="Revoke the user's key matching a prefix and/or name.")
        revoke.add_argument("--user", required=True, help="Username.")
        revoke.add_argument("--prefix", help="The 8 hex characters after mcpk_ (or the whole mcpk_<prefix>_ part).")
        revoke.add_argument("--name", help="Key name.")
        revoke.add_argument("--all", action="store_true", help="Revoke every match, even more than one.")
        listing = actions.add_parser("list", help="The user's keys (never their values).")
        listing.add_argument("--user", required=True, help="Username.")
        for command in (revoke, listing):
            command.add_argument("--json", action="store_true", help="Print one JSON value and nothing else.")

    def handle_issue(self, options: dict[str, Any]) -> None:
        key, raw = issue_api_key(options["user"], name=options["name"], expires_at=expiry(options["expires_in_days"]))
        if self.emit(options, {"key": raw, "prefix": key.prefix, "expires_at": when(key.expires_at)}):
            return
        self.stdout.write(raw)
        self.stderr.write(f"Issued mcpk_{key.prefix}_… (shown only this once; revoke with mcp_api_key revoke).")

    def handle_revoke(self, options: dict[str, Any]) -> None:
        keys = api_keys_to_revoke(options["user"], prefix=options["prefix"], name=options["name"])
        prefixes = list(keys.values_list("prefix", flat=True))
        revoked = self.revoke(keys, "key", options["all"], "with --prefix/--name")
        if self.emit(options, {"revoked": revoked, "prefixes": prefixes}):
            return
        self.stdout.write(f"Revoked {revoked} key(s).")

    def handle_list(self, options: dict[str, Any]) -> None:
        rows = [
            {
                "prefix": key.prefix,
                "name": key.name,
                "state": "revoked" if key.revoked_at else "expired" if not key.is_usable else "usable",
                "created_at": when(key.created_at),
                "expires_at": when(key.expires_at),
                "last_used_at": when(key.last_used_at),
            }
            for key in ApiKey.objects.filter(user=find_user(options["user"], active=False)).order_by("created_at")
        ]
        if self.emit(options, rows):
            return
        for row in rows:
            self.stdout.write(
                f"mcpk_{row['prefix']}_…\t{row['name'] or '-'}\t{row['state']}\tcreated {row['created_at']}"
                f"\tlast used {row['last_used_at'] or 'never'}"
            )
