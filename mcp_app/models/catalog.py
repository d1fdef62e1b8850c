"""A tenant's tool catalog and its binding to servers.

A ``Tool`` is a catalog entry of one tenant; a ``ServerTool`` exposes it on one of the tenant's servers, in a
stable order, optionally under another name or description. Every change bumps the catalog version of the
affected servers (see ``mcp_app.catalog.signals``), which invalidates resolved catalogs in every process.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from .servers import McpServer
from .tenancy import Tenant

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def validate_tool_name(value: str) -> None:
    if not TOOL_NAME_RE.match(value or ""):
        raise ValidationError("Tool names are 1 to 128 characters of letters, digits, '_', '-' and '.'.")


def _validate_object_schema(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValidationError("A schema must be a JSON object.")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise ValidationError(f"Not a valid JSON Schema (2020-12): {exc.message}") from exc
    if value.get("type", "object") != "object":
        raise ValidationError('Tool schemas must describe an object ("type": "object").')


class Tool(models.Model):
    """One tool in a tenant's catalog."""

    class Kind(models.TextChoices):
        PYTHON = "python", "Python (registered in code)"
        STATIC = "static", "Static (canned result or error)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tools", verbose_name="tenant")
    name = models.CharField("name", max_length=128, validators=[validate_tool_name])
    title = models.CharField("title", max_length=200, blank=True)
    description = models.TextField("description", blank=True)
    kind = models.CharField("kind", max_length=16, choices=Kind.choices, default=Kind.STATIC)
    python_name = models.CharField(
        "registered tool",
        max_length=128,
        blank=True,
        help_text="For Python tools: the name under which the function is registered with @tool.",
    )
    input_schema = models.JSONField(
        "input schema",
        default=dict,
        blank=True,
        validators=[_validate_object_schema],
        help_text="JSON Schema (2020-12) of the arguments. Python tools derive theirs from type hints.",
    )
    output_schema = models.JSONField(
        "output schema",
        null=True,
        blank=True,
        validators=[_validate_object_schema],
        help_text="JSON Schema of structuredContent, if the tool returns structured output.",
    )
    annotations = models.JSONField(
        "annotations",
        null=True,
        blank=True,
        help_text='Behaviour hints, e.g. {"readOnlyHint": true}. Python tools default to their registration.',
    )
    static_result = models.JSONField(
        "static result",
        null=True,
        blank=True,
        help_text='For static tools: the CallToolResult to return, e.g. {"content": [{"type": "text", "text": "ok"}]}.',
    )
    static_error = models.JSONField(
        "static error",
        null=True,
        blank=True,
        help_text='For static tools: a JSON-RPC error to answer instead, {"code": -32000, "message": "…", "data": …}.',
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    class Meta:
        verbose_name = "tool"
        verbose_name_plural = "tools"
        ordering = ("tenant", "name")
        constraints = [models.UniqueConstraint(fields=("tenant", "name"), name="mcp_tool_unique_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant.slug})"

    def clean(self) -> None:
        super().clean()
        if self.kind == self.Kind.PYTHON:
            from ..catalog.registry import registry

            if not self.python_name:
                self.python_name = self.name
            if registry.get(self.python_name) is None:
                raise ValidationError({"python_name": f"No tool named {self.python_name!r} is registered in code."})
        elif self.kind == self.Kind.STATIC:
            from ..runtime.static import validate_static_config

            try:
                validate_static_config(self.static_result, self.static_error)
            except ValueError as exc:
                raise ValidationError(str(exc)) from exc


class ServerTool(models.Model):
    """Exposure of one catalog tool on one server."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tool_bindings", verbose_name="server")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="bindings", verbose_name="tool")
    enabled = models.BooleanField("enabled", default=True)
    position = models.PositiveIntegerField("position", default=0, help_text="tools/list order (ascending).")
    name_override = models.CharField(
        "exposed name",
        max_length=128,
        blank=True,
        validators=[validate_tool_name],
        help_text="Name clients see; empty: the tool's own name.",
    )
    description_override = models.TextField(
        "exposed description", blank=True, help_text="Description clients see; empty: the tool's own."
    )

    class Meta:
        verbose_name = "server tool"
        verbose_name_plural = "server tools"
        ordering = ("server", "position", "id")
        constraints = [models.UniqueConstraint(fields=("server", "tool"), name="mcp_server_tool_unique")]
        indexes = [models.Index(fields=("server", "enabled", "position"), name="mcp_server_tool_order")]

    def __str__(self) -> str:
        return f"{self.exposed_name} on {self.server.server_id}"

    @property
    def exposed_name(self) -> str:
        return self.name_override or self.tool.name

    def clean(self) -> None:
        super().clean()
        if self.server_id and self.tool_id and self.server.tenant_id != self.tool.tenant_id:
            raise ValidationError("A server can only expose tools of its own tenant.")
        if self.server_id and self.tool_id:
            clash = ServerTool.objects.filter(server_id=self.server_id).exclude(pk=self.pk).select_related("tool")
            if any(other.exposed_name == self.exposed_name for other in clash):
                raise ValidationError(f"This server already exposes a tool named {self.exposed_name!r}.")

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.server.tenant_id != self.tool.tenant_id:
            raise ValueError("a server can only expose tools of its own tenant")
        super().save(*args, **kwargs)
