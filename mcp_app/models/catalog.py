"""A tenant's catalog: ``Tool``, ``Resource`` and ``Prompt`` (kinds of ``CatalogEntry``), and the bindings that
expose one entry on one of the tenant's servers (``ServerTool``, ``ServerResource``, ``ServerPrompt``). Every change
bumps the affected servers' catalog version (``mcp_app.catalog.signals``), invalidating resolved catalogs everywhere.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from ..definitions.patterns import check_schema_patterns
from ..definitions.prompts import validate_prompt_arguments, validate_prompt_messages, validate_uri_template
from ..definitions.registry import registry
from ..definitions.static import validate_static_config
from .limits import rate_burst_field, rate_limit_field
from .servers import McpServer
from .tenancy import Tenant, TenantScoped
from .upstreams import Upstream

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def validate_tool_name(value: str) -> None:
    if not TOOL_NAME_RE.match(value or ""):
        raise ValidationError("Tool names are 1 to 128 characters of letters, digits, '_', '-' and '.'.")


def validate_object_schema(value: Any) -> None:
    """A tool's input or output schema: ``None``, or a valid JSON Schema (2020-12) of an object."""
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
    try:
        check_schema_patterns(value)  # matched in linear time on the event loop (definitions.patterns)
    except ValueError as exc:
        raise ValidationError(f"Not a schema mcp-host can check in linear time: {exc}") from exc


class CatalogEntry(TenantScoped):
    """What every kind of catalog entry shares. Each model has its own ``Kind`` choices, ``upstream`` among them:
    an entry of that kind comes from an upstream's sync (``mcp_app.federation.sync``), never from a hand, and
    names its upstream, of its own tenant."""

    Kind: ClassVar[type[models.TextChoices]]
    kind: str
    #: The field that names the entry in its tenant's catalog (unique there) and to clients.
    key: ClassVar[str] = "name"
    same_tenant = ("tenant", "upstream")

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="%(class)ss", verbose_name="tenant")
    title = models.CharField("title", max_length=200, blank=True)
    description = models.TextField("description", blank=True)
    upstream = models.ForeignKey(
        Upstream,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="%(class)ss",
        verbose_name="upstream",
        editable=False,
        help_text="For upstream entries: the upstream MCP server it was imported from (by its syncs).",
    )
    remote_name = models.CharField(
        "name upstream",
        max_length=200,
        blank=True,
        editable=False,
        help_text="For upstream entries: its name on the upstream (without the prefix).",
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{getattr(self, self.key)} ({self.tenant.slug})"

    def clean(self) -> None:
        super().clean()
        if self.kind == "upstream" and self.upstream_id is None:
            raise ValidationError(
                {"kind": "Upstream entries are imported by an upstream's sync (the Upstreams page), not made by hand."}
            )


class Tool(CatalogEntry):
    """One tool in a tenant's catalog."""

    class Kind(models.TextChoices):
        PYTHON = "python", "Python (registered in code)"
        STATIC = "static", "Static (canned result or error)"
        HTTP = "http", "HTTP (calls the tenant's webhook)"
        UPSTREAM = "upstream", "Upstream (an upstream MCP server's tool)"

    name = models.CharField("name", max_length=128, validators=[validate_tool_name])
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
        validators=[validate_object_schema],
        help_text="JSON Schema (2020-12) of the arguments. Python tools derive theirs from type hints.",
    )
    output_schema = models.JSONField(
        "output schema",
        null=True,
        blank=True,
        validators=[validate_object_schema],
        help_text="JSON Schema of structuredContent, if the tool returns structured output.",
    )
    annotations = models.JSONField(
        "annotations",
        null=True,
        blank=True,
        help_text='Behaviour hints, e.g. {"readOnlyHint": true}. Python tools default to their registration.',
    )
    price = models.DecimalField(
        "price per call",
        max_digits=20,
        decimal_places=6,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="What one call costs, counted in the usage ledger and against cost budgets (docs/budgets.md). "
        "A result's _meta may report a cost of its own, added to it.",
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
    static_cases = models.JSONField(
        "static cases",
        default=list,
        blank=True,
        help_text="For static tools: answers chosen by the arguments, first match wins, else the result/error above. "
        'e.g. [{"equals": {"city": "Paris"}, "result": {…}}, {"contains": {"note": "urgent"}, "error": {…}}, '
        '{"pointer": [{"pointer": "/order/id", "matches": "^A[0-9]+$"}], "result": {…}}]',
    )
    static_delay_ms = models.PositiveIntegerField(
        "static delay (ms)",
        default=0,
        help_text="For static tools: how long to take before answering (at most 10 minutes).",
    )
    static_progress_steps = models.PositiveSmallIntegerField(
        "static progress steps",
        default=0,
        help_text="For static tools: progress notifications sent (spread over the delay) before answering, when the "
        "client asked for progress.",
    )
    task_support = models.CharField(
        "task support",
        max_length=16,
        choices=[("forbidden", "Never a task"), ("optional", "A task when slow"), ("required", "Always a task")],
        default="forbidden",
        help_text="2026-07-28 tasks extension: whether a call may, or must, become a durable task. Python tools take "
        "this from their @tool registration.",
    )
    icons = models.JSONField(
        "icons",
        null=True,
        blank=True,
        help_text='Icons clients may show, e.g. [{"src": "https://example.com/t.png", "mimeType": "image/png"}].',
    )
    requires_approval = models.BooleanField(
        "requires approval",
        null=True,
        blank=True,
        help_text="Whether each call waits for a tenant admin's approval, bound to its exact arguments "
        "(docs/approvals.md). Empty: only upstream tools whose destructiveHint is true, unless the operator's "
        "APPROVE_DESTRUCTIVE_UPSTREAM_TOOLS is off.",
    )
    rate_limit = rate_limit_field("tool")
    rate_burst = rate_burst_field("tool")

    class Meta:
        verbose_name = "tool"
        verbose_name_plural = "tools"
        ordering = ("tenant", "name")
        constraints = [models.UniqueConstraint(fields=("tenant", "name"), name="mcp_tool_unique_name_per_tenant")]

    def clean(self) -> None:
        super().clean()
        if self.kind == self.Kind.PYTHON:
            self._check_python_target()
            if self.tenant_id is not None and not self.tenant.allows_python_tool(self.python_name):
                raise ValidationError(
                    {"python_name": f"The operator has not allowed {self.python_name!r} for this tenant."}
                )
        elif self.kind == self.Kind.STATIC:
            try:
                validate_static_config(
                    self.static_result,
                    self.static_error,
                    self.static_cases,
                    self.static_delay_ms,
                    self.static_progress_steps,
                )
            except ValueError as exc:
                raise ValidationError(str(exc)) from exc
        if self.icons is not None and not (
            isinstance(self.icons, list)
            and all(isinstance(icon, dict) and isinstance(icon.get("src"), str) for icon in self.icons)
        ):
            raise ValidationError({"icons": 'Icons are a list of {"src": url, "mimeType"?, "sizes"?}.'})

    def _check_python_target(self) -> None:
        if not self.python_name:
            self.python_name = self.name
        if registry.get(self.python_name) is None:
            raise ValidationError({"python_name": f"No tool named {self.python_name!r} is registered in code."})

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Also without a form: a python tool always names a registered function.
        if self.kind == self.Kind.PYTHON:
            self._check_python_target()
        super().save(*args, **kwargs)


class CatalogBinding(TenantScoped):
    """Exposure of one catalog entry on one server: whether, and where in the list. ``same_tenant`` is the server
    and the foreign key to the entry: a server can only expose entries of its own tenant."""

    server: McpServer  # the concrete bindings declare the foreign key (a related_name each)

    enabled = models.BooleanField("enabled", default=True)
    position = models.PositiveIntegerField("position", default=0, help_text="List order (ascending).")

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.exposed_name} on {self.server.server_id}"

    @classmethod
    def entry_field(cls) -> str:
        """The foreign key to the exposed entry (after the server in ``same_tenant``)."""
        return cls.same_tenant[1]

    @property
    def exposed_name(self) -> str:
        """What clients know the entry by: its ``key`` (a name, a resource's URI)."""
        entry: CatalogEntry = getattr(self, self.entry_field())
        return str(getattr(entry, entry.key))


class ServerTool(CatalogBinding):
    """Exposure of one catalog tool on one server, optionally under another name or description."""

    same_tenant = ("server", "tool")

    class Execution(models.TextChoices):
        INLINE = "inline", "Inline (serving process)"
        WORKER = "worker", "Worker (Celery task)"

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tool_bindings", verbose_name="server")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="bindings", verbose_name="tool")
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
    execution = models.CharField(
        "execution",
        max_length=8,
        choices=Execution.choices,
        blank=True,
        help_text="Where calls run: inline (in the serving process) or worker (a Celery task); empty: the tool's "
        "default (a Python tool's @tool(execution=...), else inline).",
    )
    timeout_seconds = models.PositiveIntegerField(
        "timeout (s)",
        null=True,
        blank=True,
        help_text="A call running longer is failed; empty: the WORKER_CALL_TIMEOUT_SECONDS setting.",
    )

    class Meta:
        verbose_name = "server tool"
        verbose_name_plural = "server tools"
        ordering = ("server", "position", "id")
        constraints = [models.UniqueConstraint(fields=("server", "tool"), name="mcp_server_tool_unique")]
        indexes = [models.Index(fields=("server", "enabled", "position"), name="mcp_server_tool_order")]

    @property
    def exposed_name(self) -> str:
        return self.name_override or self.tool.name

    def clean(self) -> None:
        super().clean()
        if (
            self.tool_id
            and self.tool.kind == Tool.Kind.PYTHON
            and not self.tool.tenant.allows_python_tool(self.tool.python_name or self.tool.name)
        ):
            raise ValidationError(
                {"tool": f"The operator has not allowed the Python tool {self.tool.python_name!r} for this tenant."}
            )
        if self.server_id and self.tool_id:
            clash = ServerTool.objects.filter(server_id=self.server_id).exclude(pk=self.pk).select_related("tool")
            if any(other.exposed_name == self.exposed_name for other in clash):
                raise ValidationError(f"This server already exposes a tool named {self.exposed_name!r}.")


class Resource(CatalogEntry):
    """A resource (or a URI template of resources) in a tenant's catalog: ``static`` ones hold their text or base64
    blob; ``python`` ones come from an ``@resource`` function (given the template's variables); ``upstream`` ones
    keep the upstream's URI."""

    class Kind(models.TextChoices):
        STATIC = "static", "Static (content stored here)"
        PYTHON = "python", "Python (registered in code)"
        UPSTREAM = "upstream", "Upstream (read from an upstream MCP server)"

    key = "uri"

    uri = models.CharField(
        "URI or URI template",
        max_length=2000,
        help_text="e.g. file:///docs/readme.md, or a template such as test://items/{id} (RFC 6570, simple {var}).",
    )
    is_template = models.BooleanField("is a URI template", default=False)
    name = models.CharField("name", max_length=200)
    mime_type = models.CharField("MIME type", max_length=200, blank=True)
    kind = models.CharField("kind", max_length=16, choices=Kind.choices, default=Kind.STATIC)
    text = models.TextField(
        "text content", blank=True, help_text="Static text content (templates: {var} is filled in)."
    )
    blob = models.TextField("binary content (base64)", blank=True, help_text="Static binary content, base64-encoded.")
    python_name = models.CharField("registered resource", max_length=128, blank=True)
    annotations = models.JSONField("annotations", null=True, blank=True)

    class Meta:
        verbose_name = "resource"
        verbose_name_plural = "resources"
        ordering = ("tenant", "uri")
        constraints = [models.UniqueConstraint(fields=("tenant", "uri"), name="mcp_resource_unique_uri_per_tenant")]

    def clean(self) -> None:
        super().clean()
        if "://" not in self.uri and not self.uri.startswith(("urn:", "data:")):
            raise ValidationError({"uri": "A resource URI needs a scheme, e.g. file:///… or https://…"})
        if self.is_template != ("{" in self.uri):
            raise ValidationError(
                {"is_template": "Mark the resource as a template exactly when its URI has {variables}."}
            )
        if self.is_template:
            try:
                validate_uri_template(self.uri)
            except ValueError as exc:
                raise ValidationError({"uri": str(exc)}) from exc
        if self.kind == self.Kind.PYTHON:
            if registry.resource(self.python_name or "") is None:
                raise ValidationError({"python_name": f"No resource named {self.python_name!r} is registered in code."})
        elif self.text and self.blob:
            raise ValidationError("A static resource has text or a blob, not both.")
        elif self.blob:
            import base64
            import binascii

            try:
                base64.b64decode(self.blob, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValidationError({"blob": "Not valid base64."}) from exc


class Prompt(CatalogEntry):
    """A prompt template in a tenant's catalog: ``static`` ones hold their messages, with ``{argument}``
    placeholders; ``python`` ones come from an ``@prompt`` function."""

    class Kind(models.TextChoices):
        STATIC = "static", "Static (messages stored here)"
        PYTHON = "python", "Python (registered in code)"
        UPSTREAM = "upstream", "Upstream (an upstream MCP server's prompt)"

    name = models.CharField("name", max_length=128, validators=[validate_tool_name])
    kind = models.CharField("kind", max_length=16, choices=Kind.choices, default=Kind.STATIC)
    arguments = models.JSONField(
        "arguments",
        default=list,
        blank=True,
        help_text='e.g. [{"name": "topic", "description": "…", "required": true, "completions": ["a", "b"]}]',
    )
    messages = models.JSONField(
        "messages",
        default=list,
        blank=True,
        help_text='Static prompts: [{"role": "user", "content": {"type": "text", "text": "About {topic}"}}]',
    )
    python_name = models.CharField("registered prompt", max_length=128, blank=True)

    class Meta:
        verbose_name = "prompt"
        verbose_name_plural = "prompts"
        ordering = ("tenant", "name")
        constraints = [models.UniqueConstraint(fields=("tenant", "name"), name="mcp_prompt_unique_name_per_tenant")]

    def clean(self) -> None:
        super().clean()
        try:
            validate_prompt_arguments(self.arguments)
            if self.kind == self.Kind.STATIC:
                validate_prompt_messages(self.messages)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc
        if self.kind == self.Kind.PYTHON and registry.prompt(self.python_name or self.name) is None:
            raise ValidationError(
                {"python_name": f"No prompt named {self.python_name or self.name!r} is registered in code."}
            )


class ServerResource(CatalogBinding):
    """Exposure of one catalog resource (or template) on one server."""

    same_tenant = ("server", "resource")

    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="resource_bindings", verbose_name="server"
    )
    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="bindings", verbose_name="resource")

    class Meta:
        verbose_name = "server resource"
        verbose_name_plural = "server resources"
        ordering = ("server", "position", "id")
        constraints = [models.UniqueConstraint(fields=("server", "resource"), name="mcp_server_resource_unique")]


class ServerPrompt(CatalogBinding):
    """Exposure of one catalog prompt on one server."""

    same_tenant = ("server", "prompt")

    server = models.ForeignKey(
        McpServer, on_delete=models.CASCADE, related_name="prompt_bindings", verbose_name="server"
    )
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="bindings", verbose_name="prompt")

    class Meta:
        verbose_name = "server prompt"
        verbose_name_plural = "server prompts"
        ordering = ("server", "position", "id")
        constraints = [models.UniqueConstraint(fields=("server", "prompt"), name="mcp_server_prompt_unique")]
