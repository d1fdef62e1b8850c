"""``manage.py mcp_member add|remove|list``: a tenant's memberships from the command line.

A tenant's last owner is neither demoted nor removed. The role is all a user needs: it opens the admin and the
API and decides what they see and change there (``mcp_app.permissions``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from mcp_app.models import TenantMembership
from mcp_app.operations import add_member, memberships, remove_member

from ..base import OperationCommand


def _row(membership: TenantMembership) -> dict[str, str]:
    return {
        "tenant": membership.tenant.slug,
        "user": membership.user.get_username(),
        "role": membership.role,
        "since": membership.created_at.isoformat(),
    }


class Command(OperationCommand):
    help = "Add, change, remove or list tenant memberships (roles: owner, admin, viewer)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="add|remove|list")
        add = actions.add_parser("add", help="Give a user a role in a tenant (or change it).")
        remove = actions.add_parser("remove", help="End a user's membership of a tenant.")
        for command in (add, remove):
            command.add_argument("--tenant", required=True, help="Tenant slug.")
            command.add_argument("--user", required=True, help="Username.")
            command.add_argument("--json", action="store_true", help="Print one JSON object.")
        add.add_argument("--role", default="viewer", choices=TenantMembership.Role.values, help="Default: viewer.")
        listing = actions.add_parser("list", help="A tenant's or a user's memberships.")
        listing.add_argument("--tenant", help="Tenant slug.")
        listing.add_argument("--user", help="Username.")
        listing.add_argument("--json", action="store_true", help="Print a JSON array.")

    def handle_add(self, options: dict[str, Any]) -> None:
        membership, created = add_member(options["tenant"], options["user"], options["role"])
        if self.emit(options, {**_row(membership), "created": created}):
            return
        verb = "Added" if created else "Set"
        self.stdout.write(f"{verb} {options['user']} as {membership.role} of {options['tenant']}.")

    def handle_remove(self, options: dict[str, Any]) -> None:
        remove_member(options["tenant"], options["user"])
        if self.emit(options, {"tenant": options["tenant"], "user": options["user"], "removed": True}):
            return
        self.stdout.write(f"Removed {options['user']} from {options['tenant']}.")

    def handle_list(self, options: dict[str, Any]) -> None:
        rows = [_row(m) for m in memberships(tenant_slug=options["tenant"], username=options["user"])]
        if self.emit(options, rows):
            return
        for row in rows:
            self.stdout.write(f"{row['tenant']}\t{row['user']}\t{row['role']}")
