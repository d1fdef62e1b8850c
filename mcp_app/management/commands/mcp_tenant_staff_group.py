"""``manage.py mcp_tenant_staff_group [USERNAME ...]``: create (or update) the ``MCP tenant staff`` group with every
mcp_app model permission, and optionally make the named users staff members of it. Tenant members do not need it
(a membership's role grants what it allows); their roles still decide which tenants' objects they see.
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
