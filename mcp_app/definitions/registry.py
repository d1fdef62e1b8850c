"""The code registry of Python tools: the ``@tool`` decorator and autodiscovery of ``mcp_tools`` modules.

A tool's input schema comes from its type hints (closed: unknown arguments are rejected; a ``ToolContext``
parameter receives the call's context); its output schema from the return annotation: objects are structured
content as they are, other JSON values are wrapped as ``{"result": value}``, ``str`` or none means plain text.
Registration is process-global, at import time; tenants decide per server which tools to expose.
"""

from __future__ import annotations

import inspect
import threading
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints

import pydantic
from pydantic.json_schema import GenerateJsonSchema

from .context import ToolContext

ToolFunction = Callable[..., Any]


class _SchemaWithoutTitles(GenerateJsonSchema):
    """JSON Schema 2020-12 without pydantic's generated titles, which only repeat the field names."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: Any, mode: Any = "validation") -> Any:
        result = super().generate(schema, mode=mode)
        result.pop("title", None)
        return result


def _json_schema(adapter_or_model: Any) -> dict[str, Any]:
    if isinstance(adapter_or_model, type) and issubclass(adapter_or_model, pydantic.BaseModel):
        return adapter_or_model.model_json_schema(schema_generator=_SchemaWithoutTitles)
    schema: dict[str, Any] = adapter_or_model.json_schema(schema_generator=_SchemaWithoutTitles)
    return schema


@dataclass(frozen=True)
class RegisteredTool:
    name: str
    function: ToolFunction
    description: str
    title: str | None
    annotations: Mapping[str, Any] | None
    input_model: type[pydantic.BaseModel]
    input_schema: dict[str, Any]
    output_adapter: pydantic.TypeAdapter[Any] | None
    output_schema: dict[str, Any] | None
    wraps_output: bool
    context_parameter: str | None
    is_coroutine: bool
    task_support: str = "forbidden"
    execution: str = "inline"  # the default of its bindings: "inline" or "worker" (a Celery task)
    timeout: float | None = None  # seconds a call may run by default (None: WORKER_CALL_TIMEOUT_SECONDS)
    blocking: bool = True  # a sync function runs in a worker thread, unless it declared it never blocks


def _is_explicit_result(annotation: Any) -> bool:
    """``ToolResult`` / ``InputRequired`` (alone or in a union) describe their own output: no schema derived."""
    from .context import InputRequired, ToolResult

    members = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    return any(member in (ToolResult, InputRequired) for member in members)


def _is_object_type(annotation: Any) -> bool:
    origin = typing.get_origin(annotation) or annotation
    if isinstance(origin, type) and issubclass(origin, pydantic.BaseModel | dict):
        return True
    return typing.is_typeddict(annotation)


def build_registered_tool(
    function: ToolFunction,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    task_support: str = "forbidden",
    execution: str = "inline",
    timeout: float | None = None,
    blocking: bool = True,
) -> RegisteredTool:
    if task_support not in ("forbidden", "optional", "required"):
        raise ValueError("task_support is 'forbidden', 'optional' or 'required'")
    if execution not in ("inline", "worker"):
        raise ValueError("execution is 'inline' or 'worker'")
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout is a positive number of seconds")
    tool_name = name or function.__name__
    hints = get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in signature.parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args and **kwargs cannot be described by a schema")
        annotation = hints.get(parameter.name, Any)
        if annotation is ToolContext:
            context_parameter = parameter.name
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    input_model = pydantic.create_model(
        f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    input_schema = _json_schema(input_model)
    input_schema.setdefault("properties", {})

    output_adapter: pydantic.TypeAdapter[Any] | None = None
    output_schema: dict[str, Any] | None = None
    wraps_output = False
    returns = hints.get("return", inspect.Signature.empty)
    if returns not in (inspect.Signature.empty, None, type(None), str, Any) and not _is_explicit_result(returns):
        output_adapter = pydantic.TypeAdapter(returns)
        inner = _json_schema(output_adapter)
        if _is_object_type(returns):
            output_schema = inner
        else:
            wraps_output = True
            output_schema = {"type": "object", "properties": {"result": inner}, "required": ["result"]}

    doc = inspect.getdoc(function) or ""
    return RegisteredTool(
        name=tool_name,
        function=function,
        description=description if description is not None else doc,
        title=title,
        annotations=dict(annotations) if annotations else None,
        input_model=input_model,
        input_schema=input_schema,
        output_adapter=output_adapter,
        output_schema=output_schema,
        wraps_output=wraps_output,
        context_parameter=context_parameter,
        is_coroutine=inspect.iscoroutinefunction(function),
        task_support=task_support,
        execution=execution,
        timeout=float(timeout) if timeout is not None else None,
        blocking=blocking,
    )


@dataclass(frozen=True)
class RegisteredFunction:
    """A prompt or resource function: its parameters (all strings) and whether it takes a ``ToolContext``."""

    name: str
    function: Callable[..., Any]
    description: str
    title: str | None
    parameters: tuple[tuple[str, str, bool], ...]  # (name, description, required)
    context_parameter: str | None
    is_coroutine: bool


def build_registered_function(
    function: Callable[..., Any], *, name: str | None = None, title: str | None = None, description: str | None = None
) -> RegisteredFunction:
    hints = get_type_hints(function, include_extras=True)
    parameters = []
    context_parameter = None
    for parameter in inspect.signature(function).parameters.values():
        annotation = hints.get(parameter.name, Any)
        if annotation is ToolContext:
            context_parameter = parameter.name
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"{function.__name__}: *args and **kwargs cannot be described as arguments")
        described = ""
        for extra in getattr(annotation, "__metadata__", ()):
            described = getattr(extra, "description", None) or described
        parameters.append((parameter.name, described, parameter.default is inspect.Parameter.empty))
    return RegisteredFunction(
        name=name or function.__name__,
        function=function,
        description=description if description is not None else (inspect.getdoc(function) or ""),
        title=title,
        parameters=tuple(parameters),
        context_parameter=context_parameter,
        is_coroutine=inspect.iscoroutinefunction(function),
    )


class ToolRegistry:
    """Process-global maps of registered tools, prompts and resource functions, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._prompts: dict[str, RegisteredFunction] = {}
        self._resources: dict[str, RegisteredFunction] = {}
        self._lock = threading.Lock()

    def register_function(self, kind: str, registered: RegisteredFunction) -> RegisteredFunction:
        """Register a ``"prompt"`` or ``"resource"`` function."""
        self._add(self._prompts if kind == "prompt" else self._resources, kind, registered)
        return registered

    def prompt(self, name: str) -> RegisteredFunction | None:
        return self._prompts.get(name)

    def resource(self, name: str) -> RegisteredFunction | None:
        return self._resources.get(name)

    def register(self, registered: RegisteredTool) -> RegisteredTool:
        self._add(self._tools, "tool", registered)
        return registered

    def _add(self, table: dict[str, Any], kind: str, registered: RegisteredTool | RegisteredFunction) -> None:
        with self._lock:
            existing = table.get(registered.name)
            if existing is not None and existing.function is not registered.function:
                raise ValueError(f"a different {kind} is already registered as {registered.name!r}")
            table[registered.name] = registered

    def unregister(self, name: str) -> None:
        with self._lock:
            self._tools.pop(name, None)

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def autodiscover(self, module_name: str) -> None:
        from django.utils.module_loading import autodiscover_modules

        autodiscover_modules(module_name)


registry = ToolRegistry()


class ToolOptions(typing.TypedDict, total=False):
    """The options of ``@tool(...)``, as ``build_registered_tool`` takes them."""

    name: str | None
    title: str | None
    description: str | None
    annotations: Mapping[str, Any] | None
    task_support: str
    execution: str
    timeout: float | None
    blocking: bool


@typing.overload
def tool(function: ToolFunction, /) -> ToolFunction: ...


@typing.overload
def tool(**options: typing.Unpack[ToolOptions]) -> Callable[[ToolFunction], ToolFunction]: ...


def tool(function: ToolFunction | None = None, /, **options: typing.Unpack[ToolOptions]) -> Any:
    """Register a function as a Python tool; usable bare (``@tool``) or with options (``@tool(name=...)``).

    ``task_support`` (2026-07-28 tasks extension): ``"optional"`` tools become durable tasks when they do not
    finish at once for a client that declared the extension, ``"required"`` ones always do (and refuse clients
    without it). ``execution="worker"`` runs calls on a Celery worker (in-process without a broker) with the same
    context; ``timeout`` bounds a call in seconds. A binding may override both (``ServerTool.execution``,
    ``timeout_seconds``). ``blocking=False`` declares that a sync function never blocks (no I/O, no ORM, quick):
    it then runs on the event loop, without the worker-thread hop every other sync tool pays."""

    def decorate(func: ToolFunction) -> ToolFunction:
        registry.register(build_registered_tool(func, **options))
        return func

    if function is not None:
        return decorate(function)
    return decorate


def prompt(
    *, name: str | None = None, title: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a prompt function. It takes string arguments (and optionally a ``ToolContext``) and returns a
    string (one user message), a list of messages, or ``InputRequired``."""
    return _registering("prompt", name=name, title=title, description=description)


def resource(*, name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a resource function. It receives a URI template's variables as string arguments (and optionally
    a ``ToolContext``) and returns ``str`` (text) or ``bytes`` (blob)."""
    return _registering("resource", name=name)


def _registering(kind: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        registry.register_function(kind, build_registered_function(func, **options))
        return func

    return decorate
