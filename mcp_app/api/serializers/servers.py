"""MCP servers of a tenant, and the sessions clients hold on them (read-only; terminated through their action)."""

from __future__ import annotations

from rest_framework import serializers

from ...models import McpServer, McpSession
from .base import TenantOwnedSerializer


class McpServerSerializer(TenantOwnedSerializer):
    endpoint = serializers.SerializerMethodField(help_text="The path MCP clients call: /mcp/<server id>.")
    published_version = serializers.IntegerField(
        source="published_version.number",
        read_only=True,
        default=None,
        help_text="The number of the catalog version it serves (null: none published yet; it serves its draft).",
    )

    class Meta:
        model = McpServer
        fields = (
            "id",
            "tenant",
            "server_id",
            "endpoint",
            "name",
            "title",
            "version",
            "instructions",
            "enabled",
            "allowed_origins",
            "protocol_versions",
            "sessions_required",
            "review_edits",
            "published_version",
            "catalog_version",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("catalog_version", "published_version")

    def get_endpoint(self, server: McpServer) -> str:
        return f"/mcp/{server.server_id}"


class ServerRowSerializer(serializers.ModelSerializer):
    # A row about one server (a session, a consent): its tenant is the server's. (No docstring: the schema would
    # take it as the description of the rows that have none.)
    tenant = serializers.IntegerField(source="server.tenant_id", read_only=True)


class McpSessionSerializer(ServerRowSerializer):
    class Meta:
        model = McpSession
        fields = (
            "id",
            "tenant",
            "server",
            "agent",
            "protocol_version",
            "client_info",
            "client_capabilities",
            "log_level",
            "created_at",
            "last_seen_at",
            "terminated_at",
        )
        read_only_fields = fields
