"""What mcp_app's management commands share, so that each command only declares its arguments and prints:
``OperationCommand`` (``OperationError`` as ``CommandError``, ``handle_<action>`` per subcommand, ``emit`` for
``--json``, ``revoke`` with ``--all``), and the dates as printed (``when``) and as given (``expiry``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import QuerySet
from django.utils import timezone

from .. import operations


def when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def expiry(days: float | None) -> datetime | None:
    """The expiry ``--expires-in-days`` asks for (``None``: no expiry)."""
    return timezone.now() + timedelta(days=days) if days is not None else None


class OperationCommand(BaseCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if "action" in options:
                getattr(self, f"handle_{options['action']}")(options)
            else:
                self.run(options)
        except operations.OperationError as exc:
            raise CommandError(str(exc)) from exc

    def run(self, options: dict[str, Any]) -> None:
        raise NotImplementedError  # a command without subcommands says what it does here

    def emit(self, options: dict[str, Any], value: Any) -> bool:
        """Print ``value`` as JSON when ``--json`` was given; whether it was (then nothing else is printed)."""
        if options.get("json"):
            self.stdout.write(json.dumps(value))
            return True
        return False

    def revoke(self, credentials: QuerySet[Any], noun: str, every: bool, narrow: str) -> int:
        """Revoke the matching ``credentials`` (agent tokens or API keys): one, or several with ``--all``."""
        matches = credentials.count()
        if matches == 0:
            raise CommandError(f"no unrevoked {noun} matches")
        if matches > 1 and not every:
            raise CommandError(f"{matches} {noun}s match; add --all to revoke them all, or narrow {narrow}")
        return operations.revoke(credentials)
