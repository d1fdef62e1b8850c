"""Approvals, read-only but for their decision (docs/approvals.md, "In the admin and the API"): what a parked
call asks to run (agent, server, tool, the exact arguments and their digest), why, until when, and who decided.
``status`` is as of now: a pending request past its expiry reads ``expired`` before the sweep marks it so.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ...models import Approval


class ApprovalSerializer(serializers.ModelSerializer):
    """One request to run one call of a tool that requires approval, bound to its agent, tool and arguments."""

    agent_id = serializers.CharField(source="agent.agent_id", read_only=True, help_text="The calling agent's id.")
    server_id = serializers.CharField(source="server.server_id", read_only=True, help_text="The server's id.")
    tool = serializers.CharField(source="tool_name", read_only=True, help_text="The tool, as the server exposes it.")
    status = serializers.SerializerMethodField(help_text="pending, approved, denied, expired or used: as of now.")
    decided_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, help_text="Username of the admin who decided, if anyone did."
    )
    task = serializers.CharField(
        source="task.task_id", read_only=True, default=None, help_text="The parked call's task id (its durable record)."
    )
    task_status = serializers.CharField(
        source="task.status", read_only=True, default=None, help_text="The parked call's status now."
    )

    class Meta:
        model = Approval
        fields = (
            "id",
            "tenant",
            "server",
            "server_id",
            "agent",
            "agent_id",
            "tool",
            "arguments",
            "arguments_digest",
            "reason",
            "status",
            "created_at",
            "expires_at",
            "decided_by",
            "decided_at",
            "note",
            "used_at",
            "task",
            "task_status",
        )
        read_only_fields = fields

    def get_status(self, approval: Approval) -> str:
        return str(Approval.Status.EXPIRED if approval.is_expired else approval.status)


class DecisionSerializer(serializers.Serializer):
    """The body of ``approve/`` and ``deny/``: an optional note, kept with the decision and in the audit log."""

    note = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
