"""Metering and budgets (docs/budgets.md): the usage ledger, the budgets on tenants and agents, and where a tenant
wants its budget alerts sent.

- ``UsageDay``: one row per tenant, agent, server, tool and day (the tenant's day): calls, errors, tool-seconds,
  bytes in and out, cost. Rows are added to (never rewritten) by the flusher of ``mcp_app.limits.usage``; the
  identifying strings are kept, so a deleted agent's or server's usage still adds up.
- ``Budget``: limits of calls, tool-seconds and cost per day and per month, on a tenant (``agent`` empty) or one of
  its agents. ``set_by`` says whose it is: the operator's (superusers, ``manage.py``) or the tenant's own admins'.
  Every budget that applies holds, so a tenant's admins can add a tighter budget but never raise the operator's.
- ``BudgetAlert``: a soft threshold crossed, once per budget, metric and period (the row is what makes it once).
- ``BudgetAlertHook``: the URL a tenant's alerts are POSTed to, signed with a secret stored only encrypted.
"""

from __future__ import annotations

import secrets as _secrets
from dataclasses import dataclass
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from .. import crypto
from ..definitions.http_tools import validate_url
from .agents import Agent
from .servers import McpServer
from .tenancy import Tenant

#: The metrics a budget bounds, and the periods it bounds them over.
METRICS = ("calls", "tool_seconds", "cost")
PERIODS = ("day", "month")


class UsageDay(models.Model):
    """What one agent spent on one tool of one server in one day."""

    #: The amounts of a row: what calls add to it, and what an export carries after the keys.
    AMOUNTS = ("calls", "errors", "tool_seconds", "bytes_in", "bytes_out", "cost")

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_days", verbose_name="tenant")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="usage_days", verbose_name="agent"
    )
    server = models.ForeignKey(
        McpServer, on_delete=models.SET_NULL, null=True, blank=True, related_name="usage_days", verbose_name="server"
    )
    agent_key = models.CharField("agent id", max_length=63)
    server_key = models.CharField("server id", max_length=63)
    tool_name = models.CharField("tool", max_length=128)
    day = models.DateField("day")
    calls = models.PositiveBigIntegerField("calls", default=0)
    errors = models.PositiveBigIntegerField("errors", default=0)
    tool_seconds = models.FloatField("tool-seconds", default=0.0)
    bytes_in = models.PositiveBigIntegerField("bytes in", default=0)
    bytes_out = models.PositiveBigIntegerField("bytes out", default=0)
    cost = models.DecimalField("cost", max_digits=20, decimal_places=6, default=Decimal(0))

    class Meta:
        verbose_name = "usage (per day)"
        verbose_name_plural = "usage (per day)"
        ordering = ("-day", "tool_name")
        constraints = [
            models.UniqueConstraint(
                fields=("tenant", "day", "agent_key", "server_key", "tool_name"), name="mcp_usageday_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.agent_key} {self.tool_name}: {self.calls} calls"


@dataclass(frozen=True, slots=True)
class BudgetLimit:
    """One limit of one budget row, as a token's snapshot carries it (``caching.identity.TokenEntry.budgets``):
    ``scope`` "tenant" or "agent", ``metric`` of ``METRICS``, ``period`` of ``PERIODS``."""

    budget_pk: int
    scope: str
    metric: str
    period: str
    limit: float
    alert_percent: int


class BudgetManager(models.Manager["Budget"]):
    def limits_for(self, tenant_pk: int, agent_pk: int | None) -> tuple[BudgetLimit, ...]:
        """Every limit of every budget that applies to ``agent_pk`` of ``tenant_pk`` (the tenant's rows and the
        agent's, of both ``set_by``): one query, on the cold path of a token's snapshot."""
        rows = self.filter(models.Q(agent=None) | models.Q(agent_id=agent_pk), tenant_id=tenant_pk).order_by("pk")
        found: list[BudgetLimit] = []
        for row in rows:
            scope = "tenant" if row.agent_id is None else "agent"
            for (metric, period), limit in row.limits().items():
                found.append(BudgetLimit(row.pk, scope, metric, period, limit, row.alert_percent))
        return tuple(found)


class Budget(models.Model):
    """Hard limits of a tenant's (``agent`` empty) or one agent's usage per day and per month."""

    class SetBy(models.TextChoices):
        OPERATOR = "operator", "Operator"
        TENANT = "tenant", "Tenant admins"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets", verbose_name="tenant")
    agent = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="budgets",
        verbose_name="agent",
        help_text="Empty: the budget of the whole tenant.",
    )
    set_by = models.CharField("set by", max_length=16, choices=SetBy.choices, default=SetBy.TENANT)
    calls_per_day = models.PositiveBigIntegerField("calls per day", null=True, blank=True)
    calls_per_month = models.PositiveBigIntegerField("calls per month", null=True, blank=True)
    tool_seconds_per_day = models.FloatField(
        "tool-seconds per day", null=True, blank=True, validators=[MinValueValidator(0.0)]
    )
    tool_seconds_per_month = models.FloatField(
        "tool-seconds per month", null=True, blank=True, validators=[MinValueValidator(0.0)]
    )
    cost_per_day = models.DecimalField(
        "cost per day", max_digits=20, decimal_places=6, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    cost_per_month = models.DecimalField(
        "cost per month", max_digits=20, decimal_places=6, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    alert_percent = models.PositiveSmallIntegerField(
        "alert at (%)",
        default=80,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="When usage first reaches this share of a limit in a period, an alert is recorded and sent.",
    )
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = BudgetManager()

    class Meta:
        verbose_name = "budget"
        verbose_name_plural = "budgets"
        ordering = ("tenant", "agent", "set_by")
        constraints = [
            models.UniqueConstraint(fields=("tenant", "agent", "set_by"), name="mcp_budget_unique_scope"),
            models.UniqueConstraint(
                fields=("tenant", "set_by"), condition=models.Q(agent=None), name="mcp_budget_unique_tenant_scope"
            ),
        ]

    def __str__(self) -> str:
        scope = self.agent.agent_id if self.agent_id and self.agent else "whole tenant"
        return f"{self.tenant.slug}: {scope} ({self.get_set_by_display()})"

    def clean(self) -> None:
        super().clean()
        if self.agent_id and self.agent is not None and self.agent.tenant_id != self.tenant_id:
            raise ValidationError({"agent": "The agent belongs to another tenant."})

    def limits(self) -> dict[tuple[str, str], float]:
        """``{(metric, period): limit}`` of the limits this budget sets."""
        found: dict[tuple[str, str], float] = {}
        for metric in METRICS:
            for period in PERIODS:
                value = getattr(self, f"{metric}_per_{period}")
                if value is not None:
                    found[(metric, period)] = float(value)
        return found


class BudgetAlert(models.Model):
    """A soft threshold of a budget crossed in a period: recorded once, then announced (audit, metric, webhook)."""

    #: What was crossed, and when it was sent: the columns the admin lists and the API shows.
    CROSSED = ("tenant", "budget", "metric", "period", "period_start", "percent", "used", "limit")
    DELIVERY = ("delivered_at", "delivery_error")

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_alerts", verbose_name="tenant")
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts", verbose_name="budget")
    metric = models.CharField("metric", max_length=16)
    period = models.CharField("period", max_length=8)
    period_start = models.DateField("period start")
    percent = models.PositiveSmallIntegerField("threshold (%)")
    used = models.FloatField("used when crossed")
    limit = models.FloatField("limit")
    created_at = models.DateTimeField("crossed", auto_now_add=True)
    delivered_at = models.DateTimeField("webhook delivered", null=True, blank=True)
    delivery_error = models.CharField("last delivery error", max_length=500, blank=True)

    class Meta:
        verbose_name = "budget alert"
        verbose_name_plural = "budget alerts"
        ordering = ("-created_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("budget", "metric", "period", "period_start", "percent"), name="mcp_budgetalert_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric} per {self.period} at {self.percent}% ({self.period_start})"


class BudgetAlertHook(models.Model):
    """Where a tenant's budget alerts are POSTed: a URL (SSRF-guarded like webhook tools) and a signing secret."""

    tenant = models.OneToOneField(
        Tenant, on_delete=models.CASCADE, related_name="budget_alert_hook", verbose_name="tenant"
    )
    url = models.CharField(
        "URL",
        max_length=2000,
        help_text="http:// or https:// URL alerts are POSTed to. Private, loopback and metadata addresses are "
        "refused unless the operator allow-lists them.",
    )
    signing_secret_encrypted = models.TextField("signing secret (encrypted)", editable=False)
    is_active = models.BooleanField("active", default=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    class Meta:
        verbose_name = "budget alert webhook"
        verbose_name_plural = "budget alert webhooks"

    def __str__(self) -> str:
        return self.url

    def clean(self) -> None:
        super().clean()
        try:
            validate_url(self.url)  # the rules of a webhook tool's URL, the SSRF guard's literal addresses included
        except ValueError as exc:
            raise ValidationError({"url": str(exc)}) from None

    def new_signing_secret(self) -> str:
        """Generate, store (encrypted; saved by ``save()``) and return a new signing secret: shown once."""
        secret = f"whsec_{_secrets.token_urlsafe(32)}"
        self.signing_secret_encrypted = crypto.encrypt(secret.encode())
        return secret

    def signing_secret(self) -> str:
        return crypto.decrypt(self.signing_secret_encrypted).decode()
