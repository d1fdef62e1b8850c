"""Agents of a tenant and their tokens. A token is issued by ``AgentToken.objects.issue_token``: its digest is
never shown or set, the raw value is in the create response only."""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from rest_framework import serializers
from rest_framework.fields import empty

from ...models import Agent, AgentToken, McpServer, Prompt, Resource, Tool
from ...models.agents import GRANT_RELATIONS
from .base import (
    CREDENTIAL_FIELDS,
    OWN_LIMIT_FIELDS,
    CredentialSerializer,
    ScopedRelatedField,
    TenantOwnedSerializer,
    with_raw_credential,
)


class AgentSerializer(TenantOwnedSerializer):
    class Meta:
        model = Agent
        fields = ("id", "tenant", "agent_id", "name", "is_active", *OWN_LIMIT_FIELDS, "created_at")


class AgentTokenSerializer(CredentialSerializer):
    """An agent's token. Created through ``AgentToken.objects.issue_token``; the digest is never shown or set.

    The grant (``limit_to_grant`` with the granted tools, resources and prompts, and ``read_only``) narrows what
    the token sees on its servers; granting any entry on create limits the token to the entries granted."""

    agent = ScopedRelatedField(queryset=Agent.objects.all())
    servers = ScopedRelatedField(
        queryset=McpServer.objects.all(), many=True, required=False, help_text="Servers this token may call."
    )
    granted_tools = ScopedRelatedField(
        queryset=Tool.objects.all(), many=True, required=False, help_text="With limit_to_grant: the tools it sees."
    )
    granted_resources = ScopedRelatedField(queryset=Resource.objects.all(), many=True, required=False)
    granted_prompts = ScopedRelatedField(queryset=Prompt.objects.all(), many=True, required=False)
    tenant = serializers.IntegerField(source="agent.tenant_id", read_only=True)

    class Meta:
        model = AgentToken
        fields = (
            "id",
            "tenant",
            "agent",
            "name",
            "servers",
            "limit_to_grant",
            *GRANT_RELATIONS,
            "read_only",
            *CREDENTIAL_FIELDS,
        )
        read_only_fields = ("prefix",)

    def __init__(self, instance: Any = None, data: Any = empty, **kwargs: Any) -> None:
        super().__init__(instance, data, **kwargs)
        if instance is not None and not isinstance(instance, list | models.QuerySet):
            self.fields["agent"].read_only = True

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        agent = attrs.get("agent") or (self.instance.agent if self.instance is not None else None)
        chosen = {field: attrs.get(field) for field in ("servers", *GRANT_RELATIONS)}
        if agent is not None and (foreign := AgentToken.objects.outside_tenant(agent, chosen)):
            raise serializers.ValidationError({field: ["Not of the agent's tenant."] for field in foreign})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> AgentToken:
        limited = validated_data.get("limit_to_grant", False) or any(
            field in validated_data for field in GRANT_RELATIONS
        )
        grants = {
            key: (list(validated_data.get(field) or ()) if limited else None)
            for key, field in zip(("tools", "resources", "prompts"), GRANT_RELATIONS, strict=True)
        }
        with transaction.atomic():  # the token with its scope, or nothing
            token, raw = AgentToken.objects.issue_token(
                validated_data["agent"],
                servers=validated_data.get("servers") or None,
                name=validated_data.get("name", ""),
                expires_at=validated_data.get("expires_at"),
                read_only=validated_data.get("read_only", False),
                **grants,
            )
        token.raw_token = raw  # type: ignore[attr-defined]  # returned once, by the create response
        return token


AgentTokenCreatedSerializer = with_raw_credential(AgentTokenSerializer, "token")
