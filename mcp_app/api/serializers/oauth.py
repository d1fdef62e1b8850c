"""What people allowed OAuth clients (consents, withdrawn through their action) and the agents of those
clients: both read-only here, made by the OAuth flow."""

from __future__ import annotations

from rest_framework import serializers

from ...models import OAuthAgent, OAuthConsent
from .servers import ServerRowSerializer


class OAuthClientSerializer(serializers.ModelSerializer):
    """The person and the OAuth client a row is about."""

    username = serializers.CharField(source="user.get_username", read_only=True)
    client_id = serializers.CharField(source="application.client_id", read_only=True)
    client_name = serializers.CharField(source="application.name", read_only=True)


class OAuthConsentSerializer(OAuthClientSerializer, ServerRowSerializer):
    """What a person allowed an OAuth client on one server (made on the consent page; withdrawn here)."""

    class Meta:
        model = OAuthConsent
        fields = (
            "id",
            "tenant",
            "server",
            "agent",
            "username",
            "client_id",
            "client_name",
            "limit_to_grant",
            "read_only",
            "granted_tools",
            "granted_resources",
            "granted_prompts",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class OAuthAgentSerializer(OAuthClientSerializer):
    """The agent of one person using one OAuth client in a tenant."""

    class Meta:
        model = OAuthAgent
        fields = ("id", "tenant", "agent", "username", "client_id", "client_name", "created_at")
        read_only_fields = fields
