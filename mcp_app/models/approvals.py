"""Calls that wait for a person: ``Approval``, one request to run one tool call, bound to its tenant, agent, tool,
the canonical digest of its arguments and an expiry, decided once by one of the tenant's admins (never by the
calling agent's own user), and used once. The parked call is the tasks machinery's durable record (``task``).
How a call is parked and resumed: ``mcp_app.runtime.approvals``; design: docs/approvals.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from ..conf import mcp_settings
from .agents import Agent
from .servers import McpServer
from .tasks import TERMINAL, ToolTask
from .tenancy import Tenant, TenantScoped

# Who hears a decision (``approval``): the runtime registers itself (``mcp_app.runtime.decisions``) to wake the
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


# Approvals that may still be decided or used (until their expiry).
LIVE = ("pending", "approved")


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def pending(self) -> ApprovalQuerySet:
        """Undecided and not expired."""
        return self.filter(status=Approval.Status.PENDING, expires_at__gt=timezone.now())


class ApprovalManager(models.Manager["Approval"]):
    def get_queryset(self) -> ApprovalQuerySet:
        return ApprovalQuerySet(self.model, using=self._db)

    def pending(self) -> ApprovalQuerySet:
        return self.get_queryset().pending()

    def bound_to(
        self, *, tenant_id: int, server_id: int, agent_id: int, tool_name: str, arguments_digest: str
    ) -> ApprovalQuerySet:
        """The approvals of one binding: this agent's call of this tool on this server with these arguments."""
        return self.get_queryset().filter(
            tenant_id=tenant_id,
            server_id=server_id,
            agent_id=agent_id,
            tool_name=tool_name,
            arguments_digest=arguments_digest,
        )

    def use(self, pk: int) -> bool:
        """Use approval ``pk`` up: approved and unexpired becomes ``used`` (one conditional UPDATE); ``False``
        when it is not (any more) approved, or has expired. Single use: one caller wins."""
        now = timezone.now()
        updated = self.filter(pk=pk, status=Approval.Status.APPROVED, expires_at__gt=now).update(
            status=Approval.Status.USED, used_at=now
        )
        return bool(updated)

    def use_approved(self, **binding: Any) -> Approval | None:
        """Use up an approved, unused, unexpired approval of ``binding`` (``bound_to``), the oldest first;
        ``None`` when there is none."""
        approved = self.bound_to(**binding).filter(status=Approval.Status.APPROVED, expires_at__gt=timezone.now())
        for pk in approved.order_by("created_at").values_list("pk", flat=True)[:3]:
            if self.use(pk):
                return self.select_related("decided_by").get(pk=pk)
        return None

    def request(self, *, tool_ref: int | None, arguments: dict[str, Any], reason: str, **binding: Any) -> Approval:
        """The pending approval of ``binding`` (one request per binding while it waits), or a new one that
        expires ``APPROVAL_TTL_SECONDS`` from now. Approvals of the binding past their expiry are marked
        ``expired`` first (lazily, as they are touched)."""
        with transaction.atomic():
            # The agent's row, locked, serializes its requests (PostgreSQL): two calls of one binding at once make
            # one request, not two.
            list(Agent.objects.select_for_update().filter(pk=binding["agent_id"]).values_list("pk", flat=True))
            now = timezone.now()
            scope = self.bound_to(**binding)
            scope.filter(status__in=LIVE, expires_at__lte=now).update(status=Approval.Status.EXPIRED)
            pending = scope.filter(status=Approval.Status.PENDING).select_related("task").order_by("created_at")
            found = pending.first()
            if found is not None:
                return found
            return self.create(
                tool_ref=tool_ref,
                arguments=arguments,
                reason=reason[:200],
                created_at=now,
                expires_at=now + timedelta(seconds=float(mcp_settings.APPROVAL_TTL_SECONDS)),
                **binding,
            )

    def attach(self, pk: int, task: ToolTask) -> bool:
        """Make ``task`` the parked call of approval ``pk`` unless it has one already (conditional UPDATE)."""
        return bool(self.filter(pk=pk, task__isnull=True).update(task=task))

    def past_expiry(self, now: datetime | None = None) -> ApprovalQuerySet:
        """Pending or approved, past their expiry: what ``expire_due`` marks."""
        return self.get_queryset().filter(status__in=LIVE, expires_at__lte=now or timezone.now())

    def expire_due(self, now: datetime | None = None) -> tuple[int, list[ToolTask]]:
        """Mark the pending and approved approvals past their expiry ``expired``: how many, and the parked calls
        (records not terminal yet) of those that had one, for the runtime to end."""
        due = self.past_expiry(now)
        task_pks = [pk for pk in due.exclude(task=None).values_list("task_id", flat=True)]
        count = due.update(status=Approval.Status.EXPIRED)
        parked = list(ToolTask.objects.filter(pk__in=task_pks).exclude(status__in=TERMINAL))
        return count, parked

    def delete_ended(self, retention_days: float, now: datetime | None = None) -> int:
        """Delete the ended approvals (denied, expired, used) requested more than ``retention_days`` ago."""
        cutoff = (now or timezone.now()) - timedelta(days=retention_days)
        ended = (Approval.Status.DENIED, Approval.Status.EXPIRED, Approval.Status.USED)
        count, _ = self.filter(status__in=ended, created_at__lt=cutoff).delete()
        return count

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

    @property
    def ended_text(self) -> str:
        """Why a call under this approval did not run (the text of its error result)."""
        if self.status == self.Status.DENIED:
            who = getattr(self.decided_by, "username", None) or "a tenant admin"
            note = f": {self.note}" if self.note else ""
            return f"The call of tool {self.tool_name} was denied by {who} (approval {self.pk}){note}"
        if self.status == self.Status.USED:
            return f"Approval {self.pk} of tool {self.tool_name} was used by another call of the same arguments"
        return f"The approval request {self.pk} of tool {self.tool_name} expired before it was approved"

    def may_be_decided_by(self, user: Any) -> bool:
        """Whether ``user`` may decide: not the person the calling agent acts for (an OAuth agent's user)."""
        if user is None or not getattr(user, "is_authenticated", False):
            return False
        from .oauth import OAuthAgent

        return not OAuthAgent.objects.filter(agent_id=self.agent_id, user_id=user.pk).exists()
