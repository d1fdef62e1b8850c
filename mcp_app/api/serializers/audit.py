"""The audit log's tool calls, read-only: written by the audit buffer, never through the API."""

from __future__ import annotations

from rest_framework import serializers

from ...models import ToolCall


class ToolCallSerializer(serializers.ModelSerializer):
    """One audited ``tools/call``; arguments are the redacted copy stored by the audit log."""

    class Meta:
        model = ToolCall
        fields = (
            "id",
            "tenant",
            "server",
            "agent",
            "server_key",
            "agent_key",
            "token_prefix",
            "tool_name",
            "arguments_digest",
            "arguments",
            "status",
            "error_code",
            "error_message",
            *ToolCall.RUN_FIELDS,
        )
        read_only_fields = fields
