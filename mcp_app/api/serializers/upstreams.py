"""Upstream MCP servers of a tenant, and the bodies of their actions (sync, test, bind, unbind). Secret headers and
the OAuth client secret are write-only: responses say which are set, never a value.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...definitions.http_tools import parse_secret_headers
from ...models import McpServer, Upstream
from .base import ScopedRelatedField, TenantOwnedSerializer

ENTRY_KINDS = ("tools", "resources", "prompts")


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string"}, "example": {"Authorization": "set"}}
)
class SecretHeadersField(serializers.Field):
    """Secret headers, write-only: written as an object of header names to values (or ``"Name: value"`` lines)
    that replaces them all; ``{}`` removes them all, leaving the field out keeps them, and a value ``"set"``
    keeps that header's stored value. Read as ``{"Name": "set"}`` (all the model shows)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def to_representation(self, value: dict[str, str]) -> dict[str, str]:
        return value

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if not isinstance(data, dict | str):
            raise serializers.ValidationError("An object of header names to values.")
        try:
            return parse_secret_headers(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc


class UpstreamSerializer(TenantOwnedSerializer):
    """An upstream MCP server of a tenant. Its entries, sync state and bindings are read-only here: they change
    through the actions (``sync``, ``bind``, ``unbind``). Creating one runs its first sync (see the view)."""

    secret_headers = SecretHeadersField(
        help_text='Write-only: {"Authorization": "Bearer …"} replaces every secret header ({} removes them; the '
        'value "set" keeps a stored one); responses show {"Authorization": "set"}. Stored encrypted.'
    )
    oauth_client_secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=4096,
        trim_whitespace=False,
        help_text="Write-only: the OAuth client secret (empty: remove it). Stored encrypted.",
    )
    oauth_client_secret_set = serializers.BooleanField(
        source="oauth_client_secret", read_only=True, help_text="Whether an OAuth client secret is stored."
    )
    entries = serializers.SerializerMethodField(help_text="How many tools, resources and prompts it contributes.")
    servers = serializers.SerializerMethodField(help_text="Ids of the servers it is bound to as a whole.")
    sync_status = serializers.SerializerMethodField(
        help_text="never (not synced yet), ok (the last sync succeeded) or error (see last_sync_error)."
    )

    class Meta:
        model = Upstream
        fields: tuple[str, ...] = (
            "id",
            "tenant",
            "name",
            "url",
            "prefix",
            "headers",
            "secret_headers",
            "oauth_client_id",
            "oauth_client_secret",
            "oauth_client_secret_set",
            "oauth_issuer",
            "oauth_scope",
            "timeout_seconds",
            "sync_interval_seconds",
            "era",
            "on_change",
            "enabled",
            "entries",
            "servers",
            "sync_status",
            "last_synced_at",
            "last_sync_error",
            "protocol_version",
            "server_info",
            "capabilities",
            "created_at",
            "updated_at",
        )

    def create(self, validated_data: dict[str, Any]) -> Upstream:
        """Register (``operations.register_upstream``): a failed first sync is a 400 and nothing is saved."""
        from ...operations import OperationError, register_upstream

        try:
            registration = register_upstream(self._candidate)  # type: ignore[arg-type]  # an Upstream here
        except OperationError as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from exc
        upstream = registration.upstream
        upstream.first_sync = registration.report.as_dict()  # type: ignore[attr-defined]  # the create response's
        return upstream

    @extend_schema_field(
        {
            "type": "object",
            "properties": {kind: {"type": "integer"} for kind in ENTRY_KINDS},
            "required": list(ENTRY_KINDS),
        }
    )
    def get_entries(self, upstream: Upstream) -> dict[str, int]:
        if hasattr(upstream, "tool_count"):  # counted by the list's query (Upstream.objects.with_entry_counts)
            return {kind: getattr(upstream, f"{kind[:-1]}_count") for kind in ENTRY_KINDS}
        return {kind: getattr(upstream, kind).count() for kind in ENTRY_KINDS}

    def get_servers(self, upstream: Upstream) -> list[int]:
        return sorted(binding.server_id for binding in upstream.bindings.all())

    def get_sync_status(self, upstream: Upstream) -> str:
        if upstream.last_sync_error:
            return "error"
        return "ok" if upstream.last_synced_at else "never"


class SyncReportSerializer(serializers.Serializer):
    """What a sync did (``federation.sync.SyncReport``): ok false with the error when the upstream could not be
    read (its entries are then kept as they were)."""

    ok = serializers.BooleanField()
    error = serializers.CharField(help_text="Why the sync failed; empty when ok.")
    added = serializers.ListField(child=serializers.CharField(), help_text="Names (URIs for resources) imported.")
    updated = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField(), help_text="Dropped upstream: gone everywhere.")
    skipped = serializers.ListField(child=serializers.CharField(), help_text="Not imported or not bound, and why.")
    flagged = serializers.ListField(
        child=serializers.CharField(),
        help_text="Imported with its text cleaned or cut, or holding a tag posing as a role marker, and why.",
    )


class UpstreamCreatedSerializer(UpstreamSerializer):
    sync = SyncReportSerializer(source="first_sync", read_only=True, help_text="What the first sync imported.")

    class Meta(UpstreamSerializer.Meta):
        fields: tuple[str, ...] = (*UpstreamSerializer.Meta.fields, "sync")


class UpstreamServerSerializer(serializers.Serializer):
    """The body of ``bind`` and ``unbind``: one of the upstream's tenant's servers."""

    server = ScopedRelatedField(queryset=McpServer.objects.all(), help_text="The server's id (its primary key).")


class UpstreamBoundSerializer(serializers.Serializer):
    server = serializers.IntegerField()
    servers = serializers.ListField(child=serializers.IntegerField(), help_text="Every server it is now bound to.")
    skipped = serializers.ListField(
        child=serializers.CharField(), help_text="Entries not exposed there (a name the server already uses)."
    )


class UpstreamTestSerializer(serializers.Serializer):
    """What a connection test saw, without writing anything."""

    ok = serializers.BooleanField()
    error = serializers.CharField(help_text="Why it could not connect or list; empty when ok.")
    protocol_version = serializers.CharField(allow_blank=True)
    server_info = serializers.JSONField(allow_null=True)
    capabilities = serializers.JSONField(allow_null=True)
    offers = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Upstream names by kind (tools, resources, resource_templates, prompts), before the prefix.",
    )
