"""Personal API keys (``mcpk_<prefix>_<secret>``, stored as a digest): how a user authenticates to the REST API
without a browser session, with exactly the user's roles. Not here: the rules (``mcp_app.permissions``), the DRF
glue (``mcp_app.api.authentication``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from django.utils import timezone

from .credentials import Credential, CredentialManager, prefix_field

KEY_SCHEME = "mcpk"


def looks_like_api_key(raw: str) -> bool:
    return raw.startswith(f"{KEY_SCHEME}_")


class ApiKeyManager(CredentialManager["ApiKey"]):
    scheme = KEY_SCHEME

    def issue_key(
        self, user: AbstractBaseUser, *, name: str = "", expires_at: datetime | None = None
    ) -> tuple[ApiKey, str]:
        """Create a key for ``user``; return it with the raw value (shown only once, never stored)."""
        raw, prefix, digest = self.mint()
        # Any user model: the plugin types the field as the reference deployment's AUTH_USER_MODEL.
        key = self.create(user=user, name=name, prefix=prefix, digest=digest, expires_at=expires_at)  # type: ignore[misc]
        return key, raw

    def authenticate(self, raw: str, now: datetime | None = None) -> ApiKey | None:
        """The usable key whose digest matches ``raw`` (``match``: by digest, in constant time), with its user
        loaded, or ``None``. Revoked and expired keys, and keys of inactive users, do not authenticate."""
        key = self.match(raw, self.usable(now).select_related("user"))
        if key is None or not key.user.is_active:
            return None
        return key


class ApiKey(Credential):
    """A personal bearer credential of one human user for the REST API, stored as a digest."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_api_keys", verbose_name="user"
    )
    name = models.CharField("name", max_length=200, blank=True, help_text="What this key is for, e.g. 'CI deploys'.")
    prefix = prefix_field("key", editable=False)
    # digest, created_at, expires_at, revoked_at, last_used_at: see Credential.

    objects = ApiKeyManager()

    class Meta:
        verbose_name = "API key"
        verbose_name_plural = "API keys"
        ordering = ("-created_at",)
        indexes = [models.Index(fields=("user", "revoked_at"), name="mcp_apikey_user_revoked")]

    def __str__(self) -> str:
        return f"{KEY_SCHEME}_{self.prefix}_… ({self.name or 'unnamed'})"

    def revoke(self) -> None:
        """Stop the key from working; idempotent (a second revoke keeps the first timestamp)."""
        if self.revoked_at is None:
            now = timezone.now()
            if type(self).objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=now):
                self.revoked_at = now
            else:
                self.refresh_from_db(fields=["revoked_at"])

    def touch(self, interval_seconds: float, now: datetime | None = None) -> None:
        """Record use, at most once per ``interval_seconds``, with a single conditional UPDATE."""
        now = now or timezone.now()
        if self.last_used_at is not None and now - self.last_used_at < timedelta(seconds=interval_seconds):
            return
        threshold = now - timedelta(seconds=interval_seconds)
        type(self).objects.filter(pk=self.pk).filter(
            models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=threshold)
        ).update(last_used_at=now)
        self.last_used_at = now
