"""A tenant's catalog (tools, resources, prompts) and its bindings; the rules are the models' (``full_clean``), a
binding's own errors reported on its entry's field.
"""

from __future__ import annotations

from rest_framework import serializers

from ...models import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from ...models.catalog import CatalogBinding
from .base import ModelCleanSerializer, ScopedRelatedField, TenantOwnedSerializer


def entry_fields(*own: str) -> tuple[str, ...]:
    """A catalog entry's fields on the wire: its id and tenant, its own, then when it was created and changed."""
    return ("id", "tenant", *own, "created_at", "updated_at")


class ToolSerializer(TenantOwnedSerializer):
    class Meta:
        model = Tool
        fields = entry_fields(
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
            "requires_approval",
            "icons",
            "rate_limit",
            "rate_burst",
            "price",
        )


class ResourceSerializer(TenantOwnedSerializer):
    class Meta:
        model = Resource
        fields = entry_fields(
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
        )


class PromptSerializer(TenantOwnedSerializer):
    class Meta:
        model = Prompt
        fields = entry_fields("name", "title", "description", "kind", "arguments", "messages", "python_name")


class BindingSerializer(ModelCleanSerializer):
    """A server exposing one catalog entry; the server and the entry must be of the same tenant."""

    serializer_related_field = ScopedRelatedField  # the server and the entry: of tenants where you may write
    create_only_fields = ("server",)

    @property
    def whole_object_field(self) -> str:  # type: ignore[override]  # a binding's own errors are its entry's
        binding: type[CatalogBinding] = self.Meta.model
        return binding.entry_field()


class ServerToolSerializer(BindingSerializer):
    exposed_name = serializers.CharField(read_only=True, help_text="The name clients see.")

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
    class Meta:
        model = ServerResource
        fields = ("id", "server", "resource", "enabled", "position")


class ServerPromptSerializer(BindingSerializer):
    class Meta:
        model = ServerPrompt
        fields = ("id", "server", "prompt", "enabled", "position")
