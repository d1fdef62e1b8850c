"""A tenant's catalog (tools, resources, prompts) and its bindings: which server exposes which entry.

The rules are the models' (``full_clean``): a binding's server and entry are of the same tenant, and a server
exposes an entry once; a binding's errors are reported on its entry's field.
"""

from __future__ import annotations

from rest_framework import serializers

from ...models import McpServer, Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from .base import ModelCleanSerializer, ScopedRelatedField, TenantOwnedSerializer


class ToolSerializer(TenantOwnedSerializer):
    class Meta:
        model = Tool
        fields = (
            "id",
            "tenant",
            "name",
            "title",
            "description",
            "kind",
            "python_name",
            "input_schema",
            "output_schema",
            "annotations",
            "static_result",
            "static_error",
            "static_cases",
            "static_delay_ms",
            "static_progress_steps",
            "task_support",
            "icons",
            "rate_limit",
            "rate_burst",
            "created_at",
            "updated_at",
        )


class ResourceSerializer(TenantOwnedSerializer):
    class Meta:
        model = Resource
        fields = (
            "id",
            "tenant",
            "uri",
            "is_template",
            "name",
            "title",
            "description",
            "mime_type",
            "kind",
            "text",
            "blob",
            "python_name",
            "annotations",
            "created_at",
            "updated_at",
        )


class PromptSerializer(TenantOwnedSerializer):
    class Meta:
        model = Prompt
        fields = (
            "id",
            "tenant",
            "name",
            "title",
            "description",
            "kind",
            "arguments",
            "messages",
            "python_name",
            "created_at",
            "updated_at",
        )


class BindingSerializer(ModelCleanSerializer):
    """A server exposing one catalog entry; the server and the entry must be of the same tenant."""

    server = ScopedRelatedField(queryset=McpServer.objects.all())
    create_only_fields = ("server",)


class ServerToolSerializer(BindingSerializer):
    tool = ScopedRelatedField(queryset=Tool.objects.all())
    exposed_name = serializers.CharField(read_only=True, help_text="The name clients see.")
    whole_object_field = "tool"

    class Meta:
        model = ServerTool
        fields = (
            "id",
            "server",
            "tool",
            "enabled",
            "position",
            "name_override",
            "description_override",
            "execution",
            "timeout_seconds",
            "exposed_name",
        )


class ServerResourceSerializer(BindingSerializer):
    resource = ScopedRelatedField(queryset=Resource.objects.all())
    whole_object_field = "resource"

    class Meta:
        model = ServerResource
        fields = ("id", "server", "resource", "enabled", "position")


class ServerPromptSerializer(BindingSerializer):
    prompt = ScopedRelatedField(queryset=Prompt.objects.all())
    whole_object_field = "prompt"

    class Meta:
        model = ServerPrompt
        fields = ("id", "server", "prompt", "enabled", "position")
