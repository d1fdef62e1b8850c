"""Tenants (read-only here: the operator's, in the admin) and their memberships (written by owners)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import models
from rest_framework import serializers

from ...models import Tenant, TenantMembership
from ...permissions import OWNER, access_for
from .base import OWN_LIMIT_FIELDS, ModelCleanSerializer, ScopedRelatedField


class TenantSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="Your role in this tenant (null: none, e.g. a superuser).")

    class Meta:
        model = Tenant
        # max_worker_calls, the rate limit and the time zone (whose days budgets count) are the operator's
        # (superusers, in the admin): shown, never written here.
        fields = ("id", "slug", "name", "is_active", *OWN_LIMIT_FIELDS, "time_zone", "created_at", "role")
        read_only_fields = fields

    def get_role(self, tenant: Tenant) -> str | None:
        request = self.context.get("request")
        if request is None:
            return None
        return access_for(request.user).role(tenant.pk)


class TenantMembershipSerializer(ModelCleanSerializer):
    tenant = ScopedRelatedField(queryset=Tenant.objects.all(), minimum=OWNER, required=False)
    user = serializers.SlugRelatedField(
        slug_field="username",
        queryset=get_user_model().objects.filter(is_active=True),
        help_text="The member's username.",
    )
    create_only_fields = ("tenant", "user")
    tenant_role = OWNER

    class Meta:
        model = TenantMembership
        fields = ("id", "tenant", "user", "role", "created_at")

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        # Demoting the last owner is refused by TenantMembership.clean; removing it by the view's destroy.
        assert isinstance(candidate, TenantMembership)
        member = TenantMembership.objects.filter(tenant_id=candidate.tenant_id, user_id=candidate.user_id)
        if self.instance is None and member.exists():
            raise serializers.ValidationError({"user": ["This user is already a member of the tenant."]})


def ensure_another_owner(membership: TenantMembership) -> None:
    """A tenant keeps at least one owner: the last one is not removed (``TenantMembership.objects.owners_left``)."""
    if not TenantMembership.objects.owners_left(membership.tenant_id, without=[membership.pk]):
        raise serializers.ValidationError(
            {"role": ["A tenant keeps at least one owner: make someone else owner first."]}
        )
