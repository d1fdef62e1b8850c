"""Existing tenant members become staff: a membership now opens the admin by itself (``TenantMembership.save``)."""

from typing import Any

from django.conf import settings
from django.db import migrations


def members_are_staff(apps: Any, schema_editor: Any) -> None:
    users = apps.get_model(settings.AUTH_USER_MODEL)
    if not any(field.name == "is_staff" for field in users._meta.get_fields()):
        return
    memberships = apps.get_model("mcp_app", "TenantMembership")
    members = memberships.objects.values("user_id")
    users._default_manager.filter(pk__in=members, is_staff=False).update(is_staff=True)


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("mcp_app", "0017_upstream_era"),
    ]

    operations = [migrations.RunPython(members_are_staff, migrations.RunPython.noop)]
