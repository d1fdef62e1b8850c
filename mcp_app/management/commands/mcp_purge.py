"""``manage.py mcp_purge [--dry-run]``: delete expired tool calls, sessions and tasks, printing the counts, and
fail the worker calls past their deadline (the reaper, ``mcp_app.workers.running.reaper.fail_overdue``).

A thin front door onto ``mcp_app.maintenance.purge_expired``; run it from cron (or a beat schedule) daily.
Where Celery beat runs, ``mcp_app.reap_worker_calls`` does the reaping every 30 s.
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
