"""``manage.py mcp_usage export --tenant T --month YYYY-MM [--format csv|json]``: one tenant's usage ledger for a
month on stdout, the same rows and fields as ``GET /api/v1/usage/`` (``limits.export``). Always one tenant
(``--tenant`` is required): an export never mixes tenants. What processes still buffer (at most one flush
interval) is not in it yet. docs/budgets.md.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_app.limits import export
from mcp_app.models import Tenant, UsageDay

from ..base import OperationCommand


class Command(OperationCommand):
    help = "Export a tenant's usage ledger (per agent, server, tool and day) for one month, as CSV or JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="export")
        run = actions.add_parser("export", help="Print one tenant's usage of one month (its days) on stdout.")
        run.add_argument("--tenant", required=True, help="Tenant slug.")
        run.add_argument("--month", required=True, help="The month, YYYY-MM (e.g. 2026-12), in the tenant's days.")
        run.add_argument("--format", default="csv", choices=("csv", "json"), help="csv (default) or json.")

    def handle_export(self, options: dict[str, Any]) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant with slug {options['tenant']!r}")
        try:
            first, last = export.month_days(options["month"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        rows = export.ordered(UsageDay.objects.filter(tenant=tenant, day__gte=first, day__lte=last))
        records = (export.record(row) for row in rows.iterator(chunk_size=2000))
        if options["format"] == "json":
            self.stdout.write(json.dumps(list(records)))
            return
        for line in export.csv_lines(records):
            self.stdout.write(line, ending="")
