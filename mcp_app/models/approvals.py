"""Calls that wait for a person: ``Approval``, one request to run one tool call, bound to its tenant, agent, tool,
the canonical digest of its arguments and an expiry, decided once by one of the tenant's admins (never by the
calling agent's own user), and used once. The parked call is the tasks machinery's durable record (``task``).
How a call is parked and resumed: ``mcp_app.runtime.approvals``; design: docs/approvals.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from .agents import Agent
from .servers import McpServer
from .tasks import ToolTask
from .tenancy import Tenant, TenantScoped

# Who hears a decision (``approval``): the runtime registers itself (``mcp_app.runtime.approvals``) to wake the
# parked call; the model holds state and never touches the channel layer.
DecisionListener = Callable[["Approval"], None]
_listeners: list[DecisionListener] = []


def on_decision(listener: DecisionListener) -> DecisionListener:
    """Call ``listener`` with each approval once it is approved or denied; usable as a decorator."""
    _listeners.append(listener)
    return listener


def _tell(approval: Approval) -> None:
    for listener in tuple(_listeners):
        listener(approval)


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def pending(self) -> ApprovalQuerySet:
        """Undecided and not expired."""
        return self.filter(status=Approval.Status.PENDING, expires_at__gt=timezone.now())


class ApprovalManager(models.Manager["Approval"]):
    def get_queryset(self) -> ApprovalQuerySet:
        return ApprovalQuerySet(self.model, using=self._db)

    def pending(self) -> ApprovalQuerySet:
        return self.get_queryset().pending()

    def decide(self, approval: Approval, *, user: Any, approve: bool, note: str = "") -> bool:
        """Approve or deny ``approval`` as ``user`` (a conditional UPDATE: only a pending, unexpired request, and
        never by the user the calling agent acts for). ``False``: it was decided, expired or not this user's to
        decide; the caller says so. Listeners hear a decision after the transaction commits."""
        if not approval.may_be_decided_by(user):
            return False
        status = Approval.Status.APPROVED if approve else Approval.Status.DENIED
        now = timezone.now()
        updated = self.filter(pk=approval.pk, status=Approval.Status.PENDING, expires_at__gt=now).update(
            status=status, decided_by=user, decided_at=now, note=note[:500]
        )
        if not updated:
            return False
        approval.status, approval.decided_by, approval.decided_at, approval.note = status, user, now, note[:500]
        transaction.on_commit(lambda: _tell(approval))
        return True


class Approval(TenantScoped):
    """One request to run one call of a tool that requires approval."""

    same_tenant = ("tenant", "server", "agent")

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for approval"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        EXPIRED = "expired", "Expired"
        USED = "used", "Used"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approvals", verbose_name="tenant")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="approvals", verbose_name="server")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="approvals", verbose_name="agent")
    tool_name = models.CharField("tool", max_length=128, help_text="As the server exposes it.")
    tool_ref = models.BigIntegerField("catalog tool", null=True, blank=True)
    arguments = models.JSONField("arguments", default=dict, blank=True)
    arguments_digest = models.CharField(
        "arguments digest", max_length=64, help_text="sha256 of the canonical JSON of the arguments."
    )
    reason = models.CharField(
        "why approval is required", max_length=200, blank=True, help_text="The tool's setting, or its destructiveHint."
    )
    task = models.ForeignKey(
        ToolTask,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="approvals",
        verbose_name="parked call",
        help_text="The durable record of the call waiting for this decision.",
    )
    status = models.CharField("status", max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField("requested", default=timezone.now)
    expires_at = models.DateTimeField("expires", help_text="Neither decided nor used after this.")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="decided by",
    )
    decided_at = models.DateTimeField("decided", null=True, blank=True)
    note = models.CharField("note", max_length=500, blank=True)
    used_at = models.DateTimeField("used", null=True, blank=True)

    objects = ApprovalManager()

    class Meta:
        verbose_name = "approval"
        verbose_name_plural = "approvals"
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=("tenant", "status"), name="mcp_approval_tenant_status"),
            models.Index(fields=("agent", "tool_name", "arguments_digest"), name="mcp_approval_binding"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} by {self.agent.agent_id} ({self.status})"

    @property
    def is_expired(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.APPROVED) and self.expires_at <= timezone.now()

    def may_be_decided_by(self, user: Any) -> bool:
        """Whether ``user`` may decide: not the person the calling agent acts for (an OAuth agent's user)."""
        if user is None or not getattr(user, "is_authenticated", False):
            return False
        from .oauth import OAuthAgent

        return not OAuthAgent.objects.filter(agent_id=self.agent_id, user_id=user.pk).exists()
