"""Bearer credentials stored as digests, what agent tokens and personal API keys share: a raw
``<scheme>_<prefix>_<secret>`` (``CredentialManager.mint``), only its SHA-256 digest stored (``Credential``),
found by digest and compared in constant time (``match``). Whose credential it is, its scheme and what revocation
reaches are the concrete models'. Fields are declared as the concrete models had them (no migration).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime
from typing import Any, Self, TypeVar

from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

PREFIX_HEX_CHARS = 8
SECRET_BYTES = 32  # 256 bits
MAX_RAW_LENGTH = 256

_C = TypeVar("_C", bound="Credential")


def prefix_field(what: str, **options: Any) -> models.CharField:
    """The display prefix of a concrete credential model (``what``: "token", "key")."""
    return models.CharField(
        "prefix",
        max_length=PREFIX_HEX_CHARS,
        db_index=True,
        validators=[RegexValidator(r"^[0-9a-f]{8}$")],
        help_text=f"Shown to identify the {what}; not secret and not enough to use it.",
        **options,
    )


def credential_digest(raw: str) -> str:
    """The stored form of a raw credential."""
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class CredentialQuerySet(models.QuerySet[_C]):
    def usable(self, now: datetime | None = None) -> Self:
        """Neither revoked nor expired (at ``now``)."""
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class CredentialManager(models.Manager[_C]):
    scheme = ""  # the concrete manager's: "mcp" (agent tokens), "mcpk" (API keys)

    def get_queryset(self) -> CredentialQuerySet[_C]:
        return CredentialQuerySet(self.model, using=self._db)

    def usable(self, now: datetime | None = None) -> CredentialQuerySet[_C]:
        return self.get_queryset().usable(now)

    def mint(self) -> tuple[str, str, str]:
        """A new raw credential of this manager's scheme, as ``(raw, prefix, digest)``."""
        prefix = secrets.token_hex(PREFIX_HEX_CHARS // 2)
        raw = f"{self.scheme}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
        return raw, prefix, credential_digest(raw)

    def match(self, raw: str, queryset: models.QuerySet[_C]) -> _C | None:
        """The credential of ``queryset`` (usable ones) whose digest is ``raw``'s, or ``None``."""
        if not raw.startswith(f"{self.scheme}_") or len(raw) > MAX_RAW_LENGTH:
            return None
        digest = credential_digest(raw)
        found = queryset.filter(digest=digest).first()
        if found is None or not hmac.compare_digest(found.digest, digest):
            return None
        return found


class Credential(models.Model):
    """A bearer credential stored as a digest, with its lifecycle (abstract: agent tokens and API keys)."""

    digest = models.CharField("SHA-256 digest", max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField("created", auto_now_add=True)
    expires_at = models.DateTimeField("expires", null=True, blank=True, help_text="Empty: never expires.")
    revoked_at = models.DateTimeField("revoked", null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField("last used", null=True, blank=True, editable=False)

    class Meta:
        abstract = True

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())
