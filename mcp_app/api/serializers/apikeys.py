"""Your own personal API keys, issued by ``ApiKey.objects.issue_key``: the raw key is in the create response only."""

from __future__ import annotations

from typing import Any

from ...models import ApiKey
from .base import CREDENTIAL_FIELDS, CredentialSerializer, with_raw_credential


class ApiKeySerializer(CredentialSerializer):
    """One of your own personal API keys; created through ``ApiKey.objects.issue_key``."""

    class Meta:
        model = ApiKey
        fields = ("id", "name", *CREDENTIAL_FIELDS)
        read_only_fields = ("prefix",)

    def create(self, validated_data: dict[str, Any]) -> ApiKey:
        key, raw = ApiKey.objects.issue_key(
            self.context["request"].user,
            name=validated_data.get("name", ""),
            expires_at=validated_data.get("expires_at"),
        )
        key.raw_key = raw  # type: ignore[attr-defined]
        return key


ApiKeyCreatedSerializer = with_raw_credential(ApiKeySerializer, "key")
