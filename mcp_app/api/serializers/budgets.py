"""Budgets, their alerts and the alert webhook (docs/budgets.md). The API writes only the tenant admins' own
budgets (``set_by`` is ``tenant`` for every budget created here); the operator's are listed, and writing one is
refused by ``mcp_app.permissions`` (403) for everyone but superusers. A hook's signing secret is shown once: in
the response that created it or rotated it.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...limits.burndown import BudgetBurn, burn_down
from ...models import Agent, Budget, BudgetAlert, BudgetAlertHook
from .base import ScopedRelatedField, TenantOwnedSerializer

LIMIT_FIELDS = (
    "calls_per_day",
    "calls_per_month",
    "tool_seconds_per_day",
    "tool_seconds_per_month",
    "cost_per_day",
    "cost_per_month",
)


class BurnSerializer(serializers.Serializer):
    """One limit of a budget in its current period (the tenant's day or month)."""

    metric = serializers.ChoiceField(choices=("calls", "tool_seconds", "cost"))
    period = serializers.ChoiceField(choices=("day", "month"))
    used = serializers.FloatField(help_text="What the usage ledger counts in this period so far.")
    limit = serializers.FloatField()
    percent = serializers.FloatField(help_text="100 * used / limit (may pass 100).")
    resets_at = serializers.DateTimeField(help_text="When the period ends (midnight in the tenant's time zone).")


class BudgetSerializer(TenantOwnedSerializer):
    """A budget of a tenant (``agent`` null) or one of its agents. Every budget that applies holds, so a tenant's
    admins can add a tighter budget next to the operator's but never raise it: ``set_by`` says whose it is, and
    ``operator`` budgets are read-only here (a write to one is a 403)."""

    agent = ScopedRelatedField(
        queryset=Agent.objects.all(),
        required=False,
        allow_null=True,
        help_text="An agent of the budget's tenant; null (the default): the whole tenant. Cannot change later.",
    )
    usage = serializers.SerializerMethodField(help_text="Each limit set, with what is used this day and month.")

    class Meta:
        model = Budget
        fields = ("id", "tenant", "agent", "set_by", *LIMIT_FIELDS, "alert_percent", "usage", "updated_at")
        read_only_fields = ("set_by",)

    create_only_fields: tuple[str, ...] = ("tenant", "agent")

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        assert isinstance(candidate, Budget)
        same_scope = Budget.objects.filter(tenant_id=candidate.tenant_id, agent=candidate.agent)
        if same_scope.filter(set_by=candidate.set_by).exclude(pk=candidate.pk).exists():
            scope = "this agent" if candidate.agent_id else "the whole tenant"
            raise serializers.ValidationError(
                {"non_field_errors": [f"Your admins already set a budget of {scope}: change that one."]}
            )

    @extend_schema_field(BurnSerializer(many=True))
    def get_usage(self, budget: Budget) -> list[dict[str, Any]]:
        burns: dict[int, BudgetBurn] = self.context.get("burns") or {}
        burn = burns.get(budget.pk) or burn_down(budget.tenant, [budget])[0]
        return [line.as_dict() for line in burn.burns]


class BudgetAlertSerializer(serializers.ModelSerializer):
    """A soft threshold of a budget crossed in a period: recorded once, then sent to the alert webhook."""

    class Meta:
        model = BudgetAlert
        fields = ("id", *BudgetAlert.CROSSED, "created_at", *BudgetAlert.DELIVERY)
        read_only_fields = fields


class BudgetAlertHookSerializer(TenantOwnedSerializer):
    """Where the tenant's budget alerts are POSTed, each signed with the hook's secret (never shown here)."""

    class Meta:
        model = BudgetAlertHook
        fields: tuple[str, ...] = ("id", "tenant", "url", "is_active", "updated_at")

    def validate_candidate(self, candidate: models.Model, attrs: dict[str, Any]) -> None:
        assert isinstance(candidate, BudgetAlertHook)
        if candidate.pk is None:  # a new hook gets its secret before the model validates it (it is required)
            candidate.raw_signing_secret = candidate.new_signing_secret()  # shown by the create response only


class BudgetAlertHookSecretSerializer(BudgetAlertHookSerializer):
    signing_secret = serializers.CharField(
        source="raw_signing_secret",
        read_only=True,
        help_text="The secret alerts are signed with. Shown only in this response; store it now.",
    )

    class Meta(BudgetAlertHookSerializer.Meta):
        fields = (*BudgetAlertHookSerializer.Meta.fields, "signing_secret")
