"""``manage.py mcp_approvals list|approve|deny --tenant T [ID] [--json]``: calls waiting for a tenant admin's approval.

``list`` shows a tenant's approvals (the pending ones by default) with the agent, the tool and the exact arguments;
``approve`` and ``deny`` decide one as ``--user``, who must be an active admin or owner of the tenant (or a
superuser), and never the person the calling agent acts for. The waiting call is woken in whichever process holds
it. Usage: docs/approvals.md.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_app.models import Approval
from mcp_app.operations import DecisionRefused, decide_approval, find_tenant, find_user
from mcp_app.runtime import decisions  # noqa: F401  (its decision listener wakes the waiting call)

from ..base import OperationCommand, when


def _row(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.pk,
        "status": approval.status,
        "server": approval.server.server_id,
        "agent": approval.agent.agent_id,
        "tool": approval.tool_name,
        "arguments": approval.arguments,
        "arguments_digest": approval.arguments_digest,
        "reason": approval.reason,
        "task": approval.task.task_id if approval.task is not None else None,
        "created_at": when(approval.created_at),
        "expires_at": when(approval.expires_at),
        "decided_by": approval.decided_by.get_username() if approval.decided_by is not None else None,
        "decided_at": when(approval.decided_at),
        "note": approval.note,
        "used_at": when(approval.used_at),
    }


class Command(OperationCommand):
    help = "List a tenant's calls waiting for approval, and approve or deny one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="list|approve|deny")
        listing = actions.add_parser("list", help="A tenant's approvals, newest first (pending ones by default).")
        listing.add_argument("--tenant", required=True, help="Tenant slug.")
        listing.add_argument(
            "--status", default=Approval.Status.PENDING, choices=[*Approval.Status.values, "all"], help="Which ones."
        )
        listing.add_argument("--json", action="store_true", help="Print a JSON list.")
        for verb in ("approve", "deny"):
            decide = actions.add_parser(verb, help=f"{verb.capitalize()} one pending approval.")
            decide.add_argument("--tenant", required=True, help="Tenant slug.")
            decide.add_argument("id", type=int, help="The approval's id (as list shows it).")
            decide.add_argument(
                "--user", required=True, help="Who decides: an active admin or owner of the tenant (or a superuser)."
            )
            decide.add_argument("--note", default="", help="Why (kept with the decision, shown in a denied result).")
            decide.add_argument("--json", action="store_true", help="Print the decided approval as JSON.")

    def handle_list(self, options: dict[str, Any]) -> None:
        tenant = find_tenant(options["tenant"])
        Approval.objects.expire_due()  # what is past its expiry is listed as expired
        found = Approval.objects.filter(tenant=tenant).select_related("server", "agent", "task", "decided_by")
        if options["status"] != "all":
            found = found.filter(status=options["status"])
        rows = [_row(approval) for approval in found.order_by("-created_at")]
        if self.emit(options, rows):
            return
        if not rows:
            self.stdout.write(f"No {options['status']} approvals in {tenant.slug}.")
        for row in rows:
            self.stdout.write(
                f"#{row['id']} {row['status']}: {row['tool']} by agent {row['agent']} on {row['server']}, "
                f"arguments {row['arguments']}, expires {row['expires_at']}"
            )

    def handle_approve(self, options: dict[str, Any]) -> None:
        self._decide(options, approve=True)

    def handle_deny(self, options: dict[str, Any]) -> None:
        self._decide(options, approve=False)

    def _decide(self, options: dict[str, Any], *, approve: bool) -> None:
        tenant = find_tenant(options["tenant"])
        user = find_user(options["user"])
        approval = (
            Approval.objects.filter(tenant=tenant, pk=options["id"])
            .select_related("server", "agent", "task", "decided_by")
            .first()
        )
        if approval is None:
            raise CommandError(f"no approval {options['id']} in tenant {tenant.slug!r}")
        try:  # the rules of every door: an admin of the tenant, not the agent's own user, a pending request
            decide_approval(approval, user=user, approve=approve, note=options["note"])
        except DecisionRefused as exc:
            raise CommandError(f"{user.get_username()!r}: {exc}") from None
        if self.emit(options, _row(approval)):
            return
        verb = "Approved" if approve else "Denied"
        self.stdout.write(f"{verb} approval #{approval.pk}: {approval.tool_name} by agent {approval.agent.agent_id}.")
