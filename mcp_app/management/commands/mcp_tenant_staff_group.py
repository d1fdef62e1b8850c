"""``manage.py mcp_tenant_staff_group [USERNAME ...]``: create (or update) the ``MCP tenant staff`` group with every
mcp_app model permission, and optionally make the named users staff members of it.

Tenant members do not need it: a membership's role grants what it allows and makes its user staff. The group
is for staff given pages the Django way; which tenants a user sees and what they may change there is still
decided by their ``TenantMembership`` roles (see ``mcp_app.permissions``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...permissions import ensure_staff_group


class Command(BaseCommand):
    help = "Create the 'MCP tenant staff' group (all mcp_app model permissions) and add the given users to it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("usernames", nargs="*", help="Users to make staff and add to the group.")

    def handle(self, *args: Any, **options: Any) -> None:
        group = ensure_staff_group()
        user_model = get_user_model()
        for username in options["usernames"]:
            try:
                user = user_model._default_manager.get_by_natural_key(username)
            except user_model.DoesNotExist:
                raise CommandError(f"No user {username!r}.") from None
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            user.groups.add(group)
            self.stdout.write(f"{username}: staff, in {group.name!r}")
        self.stdout.write(f"Group {group.name!r} holds {group.permissions.count()} permissions.")
