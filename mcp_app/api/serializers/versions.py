"""Catalog versions of a server, its draft, diffs, and held upstream changes (docs/catalog-versions.md). All
read-only: a version is made by publishing or rolling back (the server's ``publish/`` and ``rollback/``), a held
change by an upstream's sync; publishing the server's draft is what approves its held changes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...catalog.comparison import change_diff
from ...models import CatalogChange, CatalogVersion

# The JSON Schema of one field-by-field change of an entry, and of one entry's change (EntryDiff.as_dict()).
FIELD_CHANGE_SCHEMA = {
    "type": "object",
    "properties": {"field": {"type": "string"}, "old": {}, "new": {}},
    "required": ["field", "old", "new"],
}
ENTRY_DIFF_SCHEMA = {
    "type": "object",
    "properties": {
        "list": {"type": "string", "enum": ["tools", "resources", "resourceTemplates", "prompts"]},
        "key": {"type": "string", "description": "The entry's name, or URI (template)."},
        "change": {"type": "string", "enum": ["added", "removed", "changed"]},
        "old": {"type": "object", "nullable": True, "description": "Its definition before (null: added)."},
        "new": {"type": "object", "nullable": True, "description": "Its definition after (null: removed)."},
        "fields": {"type": "array", "items": FIELD_CHANGE_SCHEMA, "description": "For a changed entry."},
    },
}
ENTRY_SCHEMA = {
    "type": "object",
    "properties": {
        "list": {"type": "string"},
        "ref": {"type": "integer", "nullable": True},
        "upstream": {"type": "integer", "nullable": True},
        "definition": {"type": "object"},
    },
}


class CatalogVersionSerializer(serializers.ModelSerializer):
    """One published snapshot of what a server exposes; ``published``: the one it serves now."""

    created_by = serializers.CharField(source="created_by.get_username", read_only=True, default=None)
    published = serializers.SerializerMethodField(help_text="Whether the server serves this version now.")
    entry_count = serializers.SerializerMethodField(help_text="How many tools, resources and prompts it holds.")

    class Meta:
        model = CatalogVersion
        fields: tuple[str, ...] = (
            "id",
            "tenant",
            "server",
            "number",
            "digest",
            "source",
            "rolled_back_to",
            "note",
            "created_by",
            "created_at",
            "published",
            "entry_count",
        )
        read_only_fields = fields

    def get_published(self, version: CatalogVersion) -> bool:
        return version.server.published_version_id == version.pk

    def get_entry_count(self, version: CatalogVersion) -> int:
        return len(version.entries or ())


class CatalogVersionDetailSerializer(CatalogVersionSerializer):
    entries = serializers.JSONField(
        read_only=True, help_text="Each entry: list, ref (the catalog row), upstream, definition (its wire object)."
    )

    class Meta(CatalogVersionSerializer.Meta):
        fields: tuple[str, ...] = (*CatalogVersionSerializer.Meta.fields, "entries")
        read_only_fields = fields


class CatalogDraftSerializer(serializers.Serializer):
    """What the server would serve if its draft were published now."""

    server = serializers.IntegerField()
    digest = serializers.CharField(help_text="sha256 of the canonical JSON of the draft's definitions.")
    published_version = serializers.IntegerField(
        allow_null=True, help_text="The number of the version served now (null: none published yet)."
    )
    differs = serializers.BooleanField(help_text="Whether the draft differs from the published version.")
    pending_changes = serializers.IntegerField(help_text="Held upstream changes that publishing the draft approves.")
    entries = serializers.ListField(child=serializers.JSONField())


_REF_SCHEMA = {
    "type": "object",
    "properties": {
        "version": {"description": 'A version number, "draft", or "nothing published".'},
        "digest": {"type": "string"},
    },
}
#: ``GET servers/{id}/diff/``: what changes from one catalog of the server to another.
DIFF_SCHEMA = {
    "type": "object",
    "properties": {
        "from": _REF_SCHEMA,
        "to": _REF_SCHEMA,
        "identical": {"type": "boolean", "description": "Same digest: both serve exactly the same definitions."},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "By change."},
        "changes": {"type": "array", "items": ENTRY_DIFF_SCHEMA},
    },
    "required": ["from", "to", "identical", "counts", "changes"],
}


class PublishSerializer(serializers.Serializer):
    version = serializers.IntegerField(
        required=False, min_value=1, help_text="Republish this version of the server; left out: its draft."
    )
    note = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class RollbackSerializer(serializers.Serializer):
    version = serializers.IntegerField(min_value=1, help_text="The version of the server to serve again.")


class CatalogChangeSerializer(serializers.ModelSerializer):
    """A change an upstream made to one of its entries, held for approval on one server; publishing the server's
    draft approves it (``status`` becomes ``published``, ``resolved_in`` the version)."""

    resolved_in = serializers.IntegerField(source="resolved_in.number", read_only=True, default=None)
    diff = serializers.SerializerMethodField(help_text="The entry's change, field by field.")

    class Meta:
        model = CatalogChange
        fields: tuple[str, ...] = (
            "id",
            "tenant",
            "server",
            "upstream",
            "list_name",
            "key",
            "ref",
            "change",
            "status",
            "old",
            "new",
            "diff",
            "first_seen_at",
            "seen_at",
            "resolved_at",
            "resolved_in",
        )
        read_only_fields = fields

    @extend_schema_field({"type": "array", "items": ENTRY_DIFF_SCHEMA})
    def get_diff(self, change: CatalogChange) -> list[dict[str, Any]]:
        return [entry.as_dict() for entry in change_diff(change)]
