"""What a hosted server exposes, as plain data: its description and its catalog of tools, resources and prompts.

The catalog layer builds a ``ServerCatalog`` per server and catalog version, whose wire forms are computed once.
A descriptor's ``target`` is opaque here: the runner interprets it. Nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from .handshake_tasks import tool_execution
from .versions import ALL_VERSIONS


def _present(**fields: Any) -> dict[str, Any]:
    """The optional fields of a wire form that have a value: empty ones are left out."""
    return {key: value for key, value in fields.items() if value}


@dataclass(frozen=True, slots=True)
class ServerDescription:
    """The public face of one hosted MCP server, including which protocol revisions it serves."""

    server_id: str
    name: str
    title: str = ""
    version: str = ""
    instructions: str = ""
    protocol_versions: tuple[str, ...] = ALL_VERSIONS
    pk: int | None = None  # the server's row (opaque here; worker calls record it)
    # The catalog revision this request is served (opaque here: catalog version, creation time in ISO form); a
    # worker running one of its calls resolves the same catalog from it.
    revision: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    """One tool as a server exposes it. ``target`` is opaque to the protocol; the runner interprets it."""

    name: str
    input_schema: Mapping[str, Any]
    description: str | None = None
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None
    icons: Sequence[Mapping[str, Any]] | None = None
    task_support: str = "forbidden"  # tasks extension: "forbidden", "optional" or "required"
    execution: str = "inline"  # "inline" (the serving process) or "worker" (a Celery task)
    timeout: float | None = None  # seconds a call may run (None: the WORKER_CALL_TIMEOUT_SECONDS setting)
    target: Any = None
    ref: int | None = None  # the catalog row it comes from (opaque here; grants select by it)
    # The tool's own rate limit (requests per second, burst; either None: the setting's), for the edge.
    rate_limit: tuple[float | None, int | None] | None = None
    price: Decimal | None = None  # what one call costs (``Tool.price``; the usage ledger, docs/budgets.md)
    # A call waits for a tenant admin's approval first (``RequestContext.approvals``, docs/approvals.md); decided
    # when the catalog is resolved, so the calls of other tools pay nothing for the gate.
    requires_approval: bool = False
    # Whether approval follows the served ``destructiveHint`` (the default rule of upstream tools): a published
    # version's annotations then count too, so an upstream cannot lift the approval by changing its own hint.
    approval_follows_hint: bool = False

    def to_wire(self) -> dict[str, Any]:
        schema = dict(self.input_schema)
        schema.setdefault("type", "object")
        # Clients index into properties; a schema without any must still carry an empty object, never null.
        if not isinstance(schema.get("properties"), dict):
            schema["properties"] = {}
        return {
            "name": self.name,
            **_present(title=self.title, description=self.description),
            "inputSchema": schema,
            **_present(
                outputSchema=self.output_schema and dict(self.output_schema),
                annotations=self.annotations and dict(self.annotations),
                icons=self.icons and [dict(icon) for icon in self.icons],
            ),
        }


class UriMatcher(Protocol):
    """A URI template's matcher: the variables of a URI it matches whole, else ``None``. It must run in time
    linear in the URI (it runs on the event loop; ``mcp_app.definitions.patterns.UriTemplate``)."""

    def match(self, uri: str) -> dict[str, str] | None: ...


@dataclass(frozen=True, slots=True)
class ResourceDescriptor:
    """One resource, or one URI template of resources (``is_template``), as a server exposes it."""

    uri: str
    name: str
    is_template: bool = False
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    annotations: Mapping[str, Any] | None = None
    pattern: UriMatcher | None = None
    target: Any = None
    ref: int | None = None  # the catalog row it comes from (opaque here; grants select by it)

    def to_wire(self) -> dict[str, Any]:
        return {
            "uriTemplate" if self.is_template else "uri": self.uri,
            "name": self.name,
            **_present(title=self.title, description=self.description, mimeType=self.mime_type),
            **_present(annotations=self.annotations and dict(self.annotations)),
        }

    def match(self, uri: str) -> dict[str, str] | None:
        if self.pattern is None:
            return {} if uri == self.uri else None
        return self.pattern.match(uri)


@dataclass(frozen=True, slots=True)
class PromptArgument:
    name: str
    description: str | None = None
    required: bool = False
    completions: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "required": self.required, **_present(description=self.description)}


@dataclass(frozen=True, slots=True)
class PromptDescriptor:
    """One prompt as a server exposes it."""

    name: str
    arguments: tuple[PromptArgument, ...] = ()
    title: str | None = None
    description: str | None = None
    target: Any = None
    ref: int | None = None  # the catalog row it comes from (opaque here; grants select by it)

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **_present(title=self.title, description=self.description),
            "arguments": [argument.to_wire() for argument in self.arguments],
        }

    def argument(self, name: str) -> PromptArgument | None:
        return next((argument for argument in self.arguments if argument.name == name), None)


def _index(items: Sequence[Any], key: Callable[[Any], str], kind: str) -> dict[str, Any]:
    index: dict[str, Any] = {}
    for item in items:
        if key(item) in index:
            raise ValueError(f"duplicate {kind} {key(item)!r} in one catalog")
        index[key(item)] = item
    return index


@dataclass(frozen=True)
class ServerCatalog:
    """The effective, ordered catalog of one server at one catalog version. Wire forms are computed once."""

    tools: Sequence[ToolDescriptor] = ()
    resources: Sequence[ResourceDescriptor] = ()
    templates: Sequence[ResourceDescriptor] = ()
    prompts: Sequence[PromptDescriptor] = ()
    # When this is one agent's view (its grant) of a server's catalog: the whole catalog, to tell entries the
    # view withholds (their tasks and update notifications are hidden too) from names that do not exist at all.
    unrestricted: ServerCatalog | None = field(default=None, repr=False, compare=False)
    _tools: dict[str, ToolDescriptor] = field(init=False, repr=False)
    _resources: dict[str, ResourceDescriptor] = field(init=False, repr=False)
    _prompts: dict[str, PromptDescriptor] = field(init=False, repr=False)
    _wire: dict[str, list[dict[str, Any]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tools", _index(self.tools, lambda item: item.name, "tool name"))
        object.__setattr__(self, "_resources", _index(self.resources, lambda item: item.uri, "resource URI"))
        object.__setattr__(self, "_prompts", _index(self.prompts, lambda item: item.name, "prompt name"))
        _index(self.templates, lambda item: item.uri, "URI template")
        object.__setattr__(
            self,
            "_wire",
            {
                "tools": [tool.to_wire() for tool in self.tools],
                "resources": [resource.to_wire() for resource in self.resources],
                "resourceTemplates": [template.to_wire() for template in self.templates],
                "prompts": [prompt.to_wire() for prompt in self.prompts],
            },
        )

    def tool(self, name: str) -> ToolDescriptor | None:
        return self._tools.get(name)

    def prompt(self, name: str) -> PromptDescriptor | None:
        return self._prompts.get(name)

    def withholds_tool(self, name: str) -> bool:
        """Whether the server has this tool but this view leaves it out."""
        return self.unrestricted is not None and self.tool(name) is None and self.unrestricted.tool(name) is not None

    def withholds_resource(self, uri: str) -> bool:
        """Whether the server has a resource (or template) for ``uri`` but this view leaves it out."""
        if self.unrestricted is None or self.find_resource(uri) is not None:
            return False
        return self.unrestricted.find_resource(uri) is not None

    def find_resource(self, uri: str) -> tuple[ResourceDescriptor, dict[str, str]] | None:
        """The resource with this URI, else the first template that matches it, with the template's variables."""
        exact = self._resources.get(uri)
        if exact is not None:
            return exact, {}
        for template in self.templates:
            variables = template.match(uri)
            if variables is not None:
                return template, variables
        return None

    def template(self, uri_template: str) -> ResourceDescriptor | None:
        return next((template for template in self.templates if template.uri == uri_template), None)

    def wire(self, kind: str) -> list[dict[str, Any]]:
        return self._wire[kind]

    def tools_wire_with_execution(self) -> list[dict[str, Any]]:
        """2025-11-25 with tasks: each task-capable tool also carries ``execution.taskSupport``."""
        wire = self._wire.get("tools+execution")
        if wire is None:
            wire = []
            for tool, entry in zip(self.tools, self._wire["tools"], strict=True):
                execution = tool_execution(tool.task_support)
                wire.append({**entry, "execution": execution} if execution is not None else entry)
            self._wire["tools+execution"] = wire
        return wire
