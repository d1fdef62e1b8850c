"""``manage.py mcp_budget set|show|clear``: the operator's budgets of a tenant and its agents (docs/budgets.md).

``set`` creates or changes the operator's budget (``set_by=operator``), which the tenant's admins can read but never
raise or remove; a limit given as ``none`` is cleared (no limit), ``0`` is a limit of zero (nothing allowed), limits
not given stay. ``show`` prints every budget of the tenant and its agents (the operator's and the tenant admins')
with what the usage ledger counts this day and month in the tenant's time zone. ``clear`` deletes a budget.
"""

from __future__ import annotations

import argparse
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import CommandParser

from mcp_app.limits.burndown import BudgetBurn, burn_down, tenant_budgets
from mcp_app.models import Budget
from mcp_app.operations import clear_budget, find_tenant, set_budget

from ..base import OperationCommand, when

CLEARED = "none"


def _number(kind: type[int] | type[float] | type[Decimal]) -> Any:
    """An argparse type: a number ≥ 0 of ``kind``, or ``none`` (``None``: clear the limit)."""

    def parse(text: str) -> int | float | Decimal | None:
        if text.strip().lower() == CLEARED:
            return None
        try:
            value = kind(text)
            finite = Decimal(str(value)).is_finite()
        except (ValueError, InvalidOperation):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number (or '{CLEARED}' to clear the limit)") from None
        if not finite:
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is negative; a limit is 0 or more")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its errors
    return parse


#: ``--option`` → (model field, number type, what it bounds).
LIMITS = {
    "calls-per-day": ("calls_per_day", int, "calls per day"),
    "calls-per-month": ("calls_per_month", int, "calls per month"),
    "tool-seconds-per-day": ("tool_seconds_per_day", float, "seconds tools run per day"),
    "tool-seconds-per-month": ("tool_seconds_per_month", float, "seconds tools run per month"),
    "cost-per-day": ("cost_per_day", Decimal, "cost per day (Tool.price summed)"),
    "cost-per-month": ("cost_per_month", Decimal, "cost per month"),
}


def _percent(text: str) -> int:
    """An argparse type: a whole percentage, 1 … 100."""
    if not text.strip().isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole percentage from 1 to 100")
    return int(text)


def _row(burn: BudgetBurn) -> dict[str, Any]:
    budget = burn.budget
    return {
        "tenant": budget.tenant.slug,
        "agent": budget.agent.agent_id if budget.agent is not None else None,
        "set_by": budget.set_by,
        "alert_percent": budget.alert_percent,
        "limits": {field: _plain(getattr(budget, field)) for field, _, _ in LIMITS.values()},
        "usage": [line.as_dict() for line in burn.burns],
        "updated_at": when(budget.updated_at),
    }


def _plain(value: Any) -> int | float | str | None:
    return str(value.normalize()) if isinstance(value, Decimal) else value


class Command(OperationCommand):
    help = "Set, show or clear the operator's budgets of a tenant and its agents (see docs/budgets.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="set|show|clear")
        change = actions.add_parser(
            "set",
            help="Create or change the operator's budget of a tenant or agent; limits not given stay as they are.",
        )
        show = actions.add_parser("show", help="Every budget of a tenant and its agents, with this period's usage.")
        clear = actions.add_parser("clear", help="Delete the operator's budget of a tenant or agent.")
        for command in (change, show, clear):
            command.add_argument("--tenant", required=True, help="Tenant slug.")
        for command in (change, clear):
            command.add_argument("--agent", help="Agent id (of the tenant): its budget instead of the whole tenant's.")
        for option, (_, kind, what) in LIMITS.items():
            change.add_argument(
                f"--{option}",
                type=_number(kind),
                default=argparse.SUPPRESS,
                metavar="N|none",
                help=f"Most {what}; '{CLEARED}' clears it, 0 allows nothing.",
            )
        change.add_argument(
            "--alert-percent",
            type=_percent,
            metavar="P",
            help="Record and send an alert when usage first reaches P%% of a limit in a period (1-100; default 80).",
        )
        clear.add_argument(
            "--set-by",
            choices=Budget.SetBy.values,
            default=Budget.SetBy.OPERATOR,
            help="Whose budget to delete: the operator's (default) or the one the tenant's admins set.",
        )
        for command in (change, show, clear):
            command.add_argument("--json", action="store_true", help="Print JSON and nothing else.")

    def handle_set(self, options: dict[str, Any]) -> None:
        limits = {
            field: options[option.replace("-", "_")]
            for option, (field, _, _) in LIMITS.items()
            if option.replace("-", "_") in options
        }
        budget, created = set_budget(
            options["tenant"], options["agent"], alert_percent=options["alert_percent"], **limits
        )
        (burn,) = burn_down(budget.tenant, [budget])
        if self.emit(options, {**_row(burn), "created": created}):
            return
        scope = f"agent {budget.agent.agent_id} of {budget.tenant.slug}" if budget.agent else budget.tenant.slug
        self.stdout.write(f"{'Created' if created else 'Changed'} the operator's budget of {scope}.")
        self._print(burn)

    def handle_show(self, options: dict[str, Any]) -> None:
        tenant = find_tenant(options["tenant"])
        burns = burn_down(tenant, tenant_budgets(tenant))
        if self.emit(
            options, {"tenant": tenant.slug, "time_zone": tenant.time_zone, "budgets": [_row(b) for b in burns]}
        ):
            return
        if not burns:
            self.stdout.write(f"No budgets in {tenant.slug}.")
        for burn in burns:
            budget = burn.budget
            scope = f"agent {budget.agent.agent_id}" if budget.agent is not None else "whole tenant"
            self.stdout.write(f"{tenant.slug}: {scope}, set by {budget.get_set_by_display().lower()}")
            self._print(burn)

    def _print(self, burn: BudgetBurn) -> None:
        if not burn.burns:
            self.stdout.write("  no limits")
        for line in burn.burns:
            self.stdout.write(
                f"  {line.metric.replace('_', '-')} per {line.period}: {line.used_shown} of {line.limit_shown} "
                f"({line.percent:.0f}%), resets {line.resets_at.isoformat()}"
            )
        self.stdout.write(f"  alert at {burn.budget.alert_percent}%")

    def handle_clear(self, options: dict[str, Any]) -> None:
        deleted = clear_budget(options["tenant"], options["agent"], options["set_by"])
        scope = f"agent {options['agent']} of {options['tenant']}" if options["agent"] else options["tenant"]
        if self.emit(options, {"tenant": options["tenant"], "agent": options["agent"], "deleted": deleted}):
            return
        whose = "operator's" if options["set_by"] == Budget.SetBy.OPERATOR else "tenant admins'"
        self.stdout.write(f"Deleted the {whose} budget of {scope}." if deleted else f"No {whose} budget of {scope}.")
