"""Tool, Resource and Prompt share one abstract base (``CatalogEntry``): the remote names of tools and prompts
widen to the resources' 200 characters; every other change is of the state only (help text, the related names
written once as a pattern). No row changes."""

import django.db.models.deletion
from django.db import migrations, models


def entry_fields():
    """The fields every entry now takes from ``CatalogEntry`` that changed (one instance per model)."""
    return {
        "tenant": models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="%(class)ss", to="mcp_app.tenant", verbose_name="tenant"),
        "upstream": models.ForeignKey(blank=True, editable=False, help_text="For upstream entries: the upstream MCP server it was imported from (by its syncs).", null=True, on_delete=django.db.models.deletion.CASCADE, related_name="%(class)ss", to="mcp_app.upstream", verbose_name="upstream"),
        "remote_name": models.CharField(blank=True, editable=False, help_text="For upstream entries: its name on the upstream (without the prefix).", max_length=200, verbose_name="name upstream"),
    }


class Migration(migrations.Migration):
    dependencies = [
        ("mcp_app", "0018_roles_admin"),
    ]

    operations = [
        *(
            migrations.AlterField(model_name=model, name=name, field=field)
            for model in ("prompt", "resource", "tool")
            for name, field in entry_fields().items()
        ),
        migrations.AlterField(
            model_name="servertool",
            name="position",
            field=models.PositiveIntegerField(default=0, help_text="List order (ascending).", verbose_name="position"),
        ),
    ]
