"""The endpoint an ``http`` tool calls (``Webhook``, one per ``Tool`` of kind ``http``): URL, method, headers,
secret headers (write-only, stored only encrypted: ``models.secrets.SecretHeaders``) and timeout, validated on
every save, not only in forms (docs/http-tools.md, "Configuration").
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db import models

from ..definitions.http_tools import display_url, validate_timeout, validate_url
from .catalog import Tool
from .secrets import SecretHeaders, SecretsQuerySet


class Webhook(SecretHeaders):
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
    timeout_seconds = models.FloatField(
        "timeout (seconds)",
        null=True,
        blank=True,
        help_text="How long the whole exchange may take; empty: the operator's default. At most the operator's "
        "maximum (MCP_APP['HTTP_TOOL_MAX_TIMEOUT_SECONDS']).",
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    objects = SecretsQuerySet["Webhook"].as_manager()

    class Meta:
        verbose_name = "webhook"
        verbose_name_plural = "webhooks"

    def __str__(self) -> str:
        return f"{self.method} {display_url(self.url)}"

    def __repr__(self) -> str:
        return f"<Webhook {self.pk}: {self}>"

    def config_checks(self) -> dict[str, Callable[[], object]]:
        return {
            "url": lambda: validate_url(self.url),
            **super().config_checks(),
            "timeout_seconds": lambda: validate_timeout(self.timeout_seconds),
        }

    def config_errors(self) -> dict[str, str]:
        if self.method not in self.Method.values:
            return {"method": f"Allowed methods: {', '.join(self.Method.values)}."}
        return {}

    def clean(self) -> None:
        if self.tool_id and self.tool.kind != Tool.Kind.HTTP:
            raise ValidationError("Only tools of kind http have a webhook.")
        super().clean()
