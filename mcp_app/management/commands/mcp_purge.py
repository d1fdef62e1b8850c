"""``manage.py mcp_purge [--dry-run]``: delete expired tool calls, sessions and tasks (``maintenance.purge_expired``)
and fail the worker calls past their deadline (``workers.running.reaper.fail_overdue``); run it daily from cron.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...maintenance import purge_expired
from ...workers.running.reaper import fail_overdue


class Command(BaseCommand):
    help = "Delete expired tool calls (AUDIT_RETENTION_DAYS), sessions and tasks; print how many went."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, dry_run: bool = False, **options: Any) -> None:
        counts = purge_expired(dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        for name, count in counts.items():
            self.stdout.write(f"{verb} {count} expired {name}")
        overdue = fail_overdue(dry_run=dry_run)
        self.stdout.write(f"{'would fail' if dry_run else 'failed'} {overdue} worker calls past their deadline")
