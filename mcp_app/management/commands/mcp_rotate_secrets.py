"""``manage.py mcp_rotate_secrets``: re-encrypt every stored secret (webhooks' and upstreams' secret headers,
upstreams' OAuth client secrets) under the first of ``MCP_APP["SECRET_KEYS"]``, all or nothing. The rotation
steps: docs/http-tools.md ("Secret headers and keys").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from mcp_app.crypto import InvalidToken
from mcp_app.models import Upstream, Webhook


class Command(BaseCommand):
    help = (
        "Re-encrypt stored secrets (http tools' secret headers, upstreams' secret headers and OAuth client "
        "secrets) under the newest of MCP_APP['SECRET_KEYS']."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with transaction.atomic():
                webhooks = Webhook.objects.rotate_secrets()
                upstreams = Upstream.objects.rotate_secrets()
        except InvalidToken as exc:
            raise CommandError(
                "A stored secret cannot be decrypted with any of the configured keys; keep the old key in "
                "SECRET_KEYS until every secret is rotated."
            ) from exc
        if options["verbosity"]:
            self.stdout.write(
                f"Re-encrypted the secret headers of {webhooks} webhook(s) and {upstreams} upstream secret(s)."
            )
