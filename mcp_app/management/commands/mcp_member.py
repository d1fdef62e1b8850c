"""``manage.py mcp_member add|remove|list``: a tenant's memberships from the command line.

``add --tenant T --user U [--role R]`` gives an active user a role (viewer by default) or changes it;
``remove --tenant T --user U`` ends a membership; ``list`` shows a tenant's (``--tenant``) or a user's
(``--user``) memberships. A tenant's last owner is neither demoted nor removed. Roles decide what a user sees in
the admin and the API; to reach the admin at all a user also needs staff status and the model permissions
(``mcp_tenant_staff_group USERNAME``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mcp_app.models import TenantMembership
from mcp_app.operations import OperationError, add_member, memberships, remove_member


class Command(BaseCommand):
    help = "Add, change, remove or list tenant memberships (roles: owner, admin, viewer)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="add|remove|list")
        add = actions.add_parser("add", help="Give a user a role in a tenant (or change it).")
        add.add_argument("--tenant", required=True, help="Tenant slug.")
        add.add_argument("--user", required=True, help="Username.")
        add.add_argument("--role", default="viewer", choices=TenantMembership.Role.values, help="Default: viewer.")
        remove = actions.add_parser("remove", help="End a user's membership of a tenant.")
        remove.add_argument("--tenant", required=True, help="Tenant slug.")
        remove.add_argument("--user", required=True, help="Username.")
        listing = actions.add_parser("list", help="A tenant's or a user's memberships.")
        listing.add_argument("--tenant", help="Tenant slug.")
        listing.add_argument("--user", help="Username.")
        listing.add_argument("--json", action="store_true", help="Print a JSON array.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"handle_{options['action']}")(options)
        except OperationError as exc:
            raise CommandError(str(exc)) from exc

    def handle_add(self, options: dict[str, Any]) -> None:
        membership, created = add_member(options["tenant"], options["user"], options["role"])
        verb = "Added" if created else "Set"
        self.stdout.write(f"{verb} {options['user']} as {membership.role} of {options['tenant']}.")

    def handle_remove(self, options: dict[str, Any]) -> None:
        remove_member(options["tenant"], options["user"])
        self.stdout.write(f"Removed {options['user']} from {options['tenant']}.")

    def handle_list(self, options: dict[str, Any]) -> None:
        rows = [
            {"tenant": m.tenant.slug, "user": m.user.get_username(), "role": m.role, "since": m.created_at.isoformat()}
            for m in memberships(tenant_slug=options["tenant"], username=options["user"])
        ]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        for row in rows:
            self.stdout.write(f"{row['tenant']}\t{row['user']}\t{row['role']}")
