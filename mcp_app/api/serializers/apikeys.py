"""Your own personal API keys, issued by ``ApiKey.objects.issue_key``: the raw key is in the create response only."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ...models import ApiKey


class ApiKeySerializer(serializers.ModelSerializer):
    """One of your own personal API keys; created through ``ApiKey.objects.issue_key``."""

    is_usable = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiKey
        fields: tuple[str, ...] = (
            "id",
            "name",
            "prefix",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "is_usable",
        )
        read_only_fields = ("prefix",)

    def create(self, validated_data: dict[str, Any]) -> ApiKey:
        key, raw = ApiKey.objects.issue_key(
            self.context["request"].user,
            name=validated_data.get("name", ""),
            expires_at=validated_data.get("expires_at"),
        )
        key.raw_key = raw  # type: ignore[attr-defined]
        return key


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        source="raw_key", read_only=True, help_text="The raw key. Shown only in this response; store it now."
    )

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")
