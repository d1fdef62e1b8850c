"""The endpoint an ``http`` tool calls: URL, method, headers, secret headers and timeout.

A ``Webhook`` belongs to exactly one ``Tool`` of kind ``http``. Plain headers are stored as they are; secret
headers (an ``Authorization`` value, an API key) are stored only encrypted (``mcp_app.crypto``, keys from
``MCP_APP["SECRET_KEYS"]``), with their names in clear so that forms can say which are set. Secret values are
write-only: ``set_secret_headers`` replaces them, ``reveal_secret_headers`` is for the runtime that sends them,
and nothing else (``str``, ``repr``, admin, API, logs) ever shows them.

Configuration is validated on every save, not only in forms: URL scheme http/https without credentials, an
allowed method, well-formed headers, a timeout within ``HTTP_TOOL_MAX_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from django.core.exceptions import ValidationError
from django.db import models, transaction

from ..crypto import encrypt, rotate
from ..definitions.http_tools import display_url, open_secret_headers, validate_headers, validate_timeout, validate_url
from .catalog import Tool


class WebhookQuerySet(models.QuerySet["Webhook"]):
    def rotate_secrets(self) -> int:
        """Re-encrypt every stored secret under the first of ``SECRET_KEYS``; returns how many were rewritten."""
        count = 0
        # All or nothing: a value no key opens (InvalidToken) leaves every row as it was.
        with transaction.atomic():
            for webhook in self.exclude(secret_headers_encrypted="").only("pk", "secret_headers_encrypted"):
                rotated = rotate(webhook.secret_headers_encrypted)
                type(webhook).objects.filter(pk=webhook.pk).update(secret_headers_encrypted=rotated)
                count += 1
        return count


class Webhook(models.Model):
    """Where, and how, an http tool sends its calls."""

    class Method(models.TextChoices):
        # Methods that carry the JSON body; GET and DELETE requests have no defined body semantics.
        POST = "POST", "POST"
        PUT = "PUT", "PUT"
        PATCH = "PATCH", "PATCH"

    tool = models.OneToOneField(Tool, on_delete=models.CASCADE, related_name="webhook", verbose_name="tool")
    url = models.CharField(
        "URL",
        max_length=2000,
        help_text="http:// or https:// URL the call is sent to, without user:password. Private, loopback and "
        "metadata addresses are refused unless the operator allow-lists them.",
    )
    method = models.CharField("method", max_length=8, choices=Method.choices, default=Method.POST)
    headers = models.JSONField(
        "headers",
        default=dict,
        blank=True,
        help_text='Plain (non-secret) request headers, e.g. {"X-Team": "billing"}. Put credentials in the secret '
        "headers instead.",
    )
    secret_headers_encrypted = models.TextField("secret headers (encrypted)", blank=True, default="", editable=False)
    secret_header_names = models.JSONField("secret header names", default=list, blank=True, editable=False)
    timeout_seconds = models.FloatField(
        "timeout (seconds)",
        null=True,
        blank=True,
        help_text="How long the whole exchange may take; empty: the operator's default. At most the operator's "
        "maximum (MCP_APP['HTTP_TOOL_MAX_TIMEOUT_SECONDS']).",
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        verbose_name = "webhook"
        verbose_name_plural = "webhooks"

    def __str__(self) -> str:
        return f"{self.method} {display_url(self.url)}"

    def __repr__(self) -> str:
        return f"<Webhook {self.pk}: {self}>"

    # Secrets ---------------------------------------------------------------------------------------------------

    @property
    def has_secret_headers(self) -> bool:
        return bool(self.secret_headers_encrypted)

    def set_secret_headers(self, values: Mapping[str, str]) -> None:
        """Replace every secret header (an empty mapping removes them). Validated; saved by ``save()``."""
        try:
            validate_headers(values, "secret headers")
        except ValueError as exc:
            raise ValidationError({"secret_headers": str(exc)}) from exc
        if values:
            self.secret_headers_encrypted = encrypt(orjson.dumps(dict(values)))
        else:
            self.secret_headers_encrypted = ""
        self.secret_header_names = sorted(values, key=str.lower)

    def reveal_secret_headers(self) -> dict[str, str]:
        """The secret headers in clear, for the request that sends them. Never display or log the result."""
        return open_secret_headers(self.secret_headers_encrypted)

    # Validation ------------------------------------------------------------------------------------------------

    def validate_config(self) -> None:
        """Raise ``ValidationError`` (by field) unless URL, method, headers and timeout are acceptable."""
        errors: dict[str, str] = {}
        for field, check in (
            ("url", lambda: validate_url(self.url)),
            ("headers", lambda: validate_headers(self.headers, "headers")),
            ("timeout_seconds", lambda: validate_timeout(self.timeout_seconds)),
        ):
            try:
                check()
            except ValueError as exc:
                errors[field] = str(exc)
        if self.method not in self.Method.values:
            errors["method"] = f"Allowed methods: {', '.join(self.Method.values)}."
        clash = {name.lower() for name in self.headers or {}} & {name.lower() for name in self.secret_header_names}
        if not errors.get("headers") and clash:
            errors["headers"] = f"Also set as a secret header: {', '.join(sorted(clash))}."
        if errors:
            raise ValidationError(errors)

    def clean(self) -> None:
        super().clean()
        if self.tool_id and self.tool.kind != Tool.Kind.HTTP:
            raise ValidationError("Only tools of kind http have a webhook.")
        self.validate_config()

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.validate_config()
        super().save(*args, **kwargs)
