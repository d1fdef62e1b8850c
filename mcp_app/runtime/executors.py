"""One executor per kind of catalog entry, in one table keyed by the type of target the catalog resolves it to.

``EXECUTORS`` maps each target type (``python``, ``static``, ``http``, ``upstream`` entries) to its ``Executor``;
``executor_for`` is the one lookup, used by the inline and the routing runner: nothing else branches on a target's
type. What every tool result gets whatever its kind stays with the runner. Design: docs/architecture.md.
"""

from __future__ import annotations

import base64
import functools
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

import orjson
import pydantic
from jsonschema import Draft202012Validator

from ..definitions import targets, upstreams
from ..definitions.context import InputRequired, ToolError, ToolResult, error_result
from ..definitions.patterns import schema_validator
from ..definitions.prompts import fill_placeholders, render_static_prompt
from ..definitions.registry import RegisteredFunction, RegisteredTool
from ..definitions.static import StaticBehaviour
from ..federation import calls as upstream_calls
from ..observability import metrics
from ..protocol.context import CallContext, InvalidToolArguments
from ..protocol.descriptors import PromptDescriptor, ResourceDescriptor, ToolDescriptor
from ..protocol.errors import InvalidParams, ProtocolError
from ..protocol.versions import LEGACY
from .invocation import answer_in_band, invoke, run_tool
from .mrtr import input_required_result, verify_state
from .webhooks import call_webhook

logger = logging.getLogger("mcp_app.runtime")

MAX_INPUT_ROUNDS = 8


class Executor:
    """How one kind runs: ``validate`` a tool's arguments (into what ``call`` takes), ``call`` the tool, ``read`` a
    resource, ``render`` a prompt; a kind overrides what its targets serve, the base checks the published schema."""

    def validate(self, tool: ToolDescriptor, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the tool's input schema; raise ``InvalidToolArguments`` with every
        problem, else return them as ``call`` takes them."""
        errors = sorted(validator(tool.input_schema).iter_errors(arguments), key=lambda error: list(error.path))
        if errors:
            raise InvalidToolArguments(_describe((error.absolute_path, error.message) for error in errors))
        return arguments

    async def call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """The ``CallToolResult`` of a call with the arguments ``validate`` returned."""
        raise TypeError(f"tool {tool.name!r} has no runnable target")

    async def read(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        """The ``ReadResourceResult`` of ``uri`` (``variables``: what a template matched in it)."""
        raise TypeError(f"resource {resource.uri!r} has no readable target")

    async def render(self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext) -> dict[str, Any]:
        """The ``GetPromptResult`` of the prompt with ``arguments``."""
        raise TypeError(f"prompt {prompt.name!r} has no target")


def executor_for(target: object) -> Executor:
    """The executor registered for ``target``'s type (``TypeError`` when there is none)."""
    executor = EXECUTORS.get(type(target))
    if executor is None:
        raise TypeError(f"no executor is registered for {type(target).__name__} targets")
    return executor


def validator(schema: Any) -> Draft202012Validator:
    """The compiled validator of a JSON Schema (input or output), shared by every entry that publishes it."""
    return _compiled(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))


@functools.lru_cache(maxsize=1024)
def _compiled(schema_json: bytes) -> Draft202012Validator:
    return schema_validator(orjson.loads(schema_json))


def _describe(problems: Iterable[tuple[Iterable[Any], str]]) -> str:
    """``location: message; …`` for each problem found in a call's arguments (a location is a path into them)."""
    return "; ".join(f"{'.'.join(map(str, path)) or 'arguments'}: {message}" for path, message in problems)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _content(resource: ResourceDescriptor, uri: str) -> dict[str, Any]:
    """A resource content's head: its URI and, when the resource declares one, its MIME type."""
    return {"uri": uri, "mimeType": resource.mime_type} if resource.mime_type else {"uri": uri}


def _described(prompt: PromptDescriptor) -> dict[str, Any]:
    return {"description": prompt.description} if prompt.description else {}


# python ----------------------------------------------------------------------------------------------------------


# The field names of each registered tool's input model, read once: pydantic's ``model_fields`` is a property that
# builds its answer on every read. One entry per input model (per registered tool): bounded.
_fields: dict[type[pydantic.BaseModel], tuple[str, ...]] = {}


def _field_names(model: type[pydantic.BaseModel]) -> tuple[str, ...]:
    names = _fields.get(model)
    if names is None:
        names = _fields[model] = tuple(model.model_fields)
    return names


class PythonExecutor(Executor):
    """Tools, resources and prompts registered in code. A ``ToolError`` becomes an ``isError`` result with its message,
    any other exception a logged ``isError`` result with a generic one, so no internals leak to the client."""

    def validate(self, tool: ToolDescriptor, arguments: dict[str, Any]) -> dict[str, Any]:
        registered: RegisteredTool = tool.target
        try:
            # Strict JSON-mode validation matches the published schema: "2" is not a number and true is not an
            # integer, while an integer still satisfies "number" and ISO strings still parse into dates.
            model = registered.input_model.model_validate_json(orjson.dumps(arguments), strict=True)
        except pydantic.ValidationError as exc:
            problems = exc.errors(include_url=False, include_input=False)
            raise InvalidToolArguments(_describe((error["loc"], error["msg"]) for error in problems)) from exc
        return {name: getattr(model, name) for name in _field_names(type(model))}

    async def call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        registered: RegisteredTool = tool.target
        try:
            value = await invoke(registered, arguments, call, verify_state(call, tool.name))
            rounds = 0
            while isinstance(value, InputRequired) and call.request.era == LEGACY and call.outbound.can_request:
                # Handshake era: carry the tool's input requests out as server-to-client requests on this call's
                # stream, then run it again with the answers, so one tool serves both eras.
                rounds += 1
                if rounds > MAX_INPUT_ROUNDS:
                    raise ToolError(f"Tool {tool.name} asked for input more than {MAX_INPUT_ROUNDS} times")
                arguments = await answer_in_band(registered, arguments, call, value)
                value = await run_tool(registered, arguments)
            if isinstance(value, InputRequired):
                return input_required_result(call, tool.name, value)
            return python_result(registered, value)
        except ToolError as exc:
            return error_result(exc.message or f"Tool {tool.name} failed", exc.code, exc.error_type)
        except ProtocolError:
            raise
        except Exception:
            logger.exception("tool %s raised", tool.name)
            return error_result(f"Tool {tool.name} failed with an internal error", "INTERNAL_ERROR", "internal_error")

    async def read(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        registered: RegisteredFunction = resource.target
        content = _content(resource, uri)
        value = await invoke(registered, dict(variables), call, None)
        if isinstance(value, bytes):
            content["blob"] = base64.b64encode(value).decode()
        elif isinstance(value, str):
            content["text"] = value
        else:
            raise TypeError(f"resource function {registered.name} returned {type(value).__name__}")
        return {"contents": [content]}

    async def render(self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext) -> dict[str, Any]:
        registered: RegisteredFunction = prompt.target
        known = {name for name, _description, _required in registered.parameters}
        unknown = sorted(set(arguments) - known)
        if unknown:
            raise InvalidParams(f"Unknown argument(s) for prompt {prompt.name}: {', '.join(unknown)}")
        salt_name = f"prompt:{prompt.name}"
        value = await invoke(registered, dict(arguments), call, verify_state(call, salt_name))
        if isinstance(value, InputRequired):
            return input_required_result(call, salt_name, value)
        if isinstance(value, str):
            return {**_described(prompt), "messages": [{"role": "user", "content": text(value)}]}
        if isinstance(value, list):
            return {**_described(prompt), "messages": value}
        raise TypeError(f"prompt function {registered.name} returned {type(value).__name__}")


def _holds_non_finite(value: Any) -> bool:
    """Whether a return value holds a float JSON cannot carry (inf, -inf, NaN), in lists, dicts and models."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, pydantic.BaseModel):
        return _holds_non_finite(value.model_dump())
    if isinstance(value, dict):
        return any(_holds_non_finite(item) for item in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(_holds_non_finite(item) for item in value)
    return False


def python_result(registered: RegisteredTool, value: Any) -> dict[str, Any]:
    """Convert a Python tool's return value into a wire ``CallToolResult``."""
    if isinstance(value, ToolResult):
        result: dict[str, Any] = {"content": list(value.content)}
        if value.structured_content is not None:
            result["structuredContent"] = value.structured_content
        if value.is_error:
            result["isError"] = True
        if value.meta:
            result["_meta"] = dict(value.meta)
        return result
    if registered.output_adapter is not None:
        if _holds_non_finite(value):
            # JSON numbers are finite (RFC 8259 §6): pydantic would write null, against the output schema.
            return error_result(
                "The result is not a finite number (infinity or NaN), which JSON cannot carry.",
                "NON_FINITE_NUMBER",
                "invalid_result",
            )
        data = registered.output_adapter.dump_python(value, mode="json")
        structured = {"result": data} if registered.wraps_output else data
        return {"content": [text(orjson.dumps(data).decode())], "structuredContent": structured}
    if value is None:
        return {"content": []}
    if isinstance(value, str):
        return {"content": [text(value)]}
    data = pydantic.TypeAdapter(Any).dump_python(value, mode="json")
    return {"content": [text(orjson.dumps(data).decode())]}


# static, http, upstream ------------------------------------------------------------------------------------------


class StaticExecutor(Executor):
    """A row's canned tool answers, resource content and prompt messages."""

    async def call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        behaviour: StaticBehaviour = tool.target
        return await behaviour.answer(arguments, call.progress.report)

    async def read(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        target: targets.StaticResourceTarget = resource.target
        content = _content(resource, uri)
        if target.blob:
            content["blob"] = target.blob
        else:
            content["text"] = fill_placeholders(target.text, variables) if resource.is_template else target.text
        return {"contents": [content]}

    async def render(self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext) -> dict[str, Any]:
        target: targets.StaticPromptTarget = prompt.target
        return {**_described(prompt), "messages": render_static_prompt(target.messages, arguments)}


class HttpExecutor(Executor):
    """A tenant's webhook (``runtime.webhooks``)."""

    async def call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        return await call_webhook(tool.target, tool.name, arguments, call)


class UpstreamExecutor(Executor):
    """An upstream MCP server's tools, resources and prompts (``mcp_app.federation``); tool calls are measured
    per upstream (``mcp_upstream_call_duration_seconds``)."""

    async def call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        target: upstreams.UpstreamToolTarget = tool.target
        started = time.perf_counter()
        answer = await upstream_calls.call_tool(
            target, tool.name, arguments, call, deadline_seconds=tool.timeout, state=verify_state(call, tool.name)
        )
        if isinstance(answer, InputRequired):
            return input_required_result(call, tool.name, answer)
        principal = call.request.principal
        metrics.record_upstream_call(
            f"{principal.tenant if principal else '-'}/{target.endpoint.name}",
            upstream_calls.outcome_of(answer),
            time.perf_counter() - started,
        )
        return answer

    async def read(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        return await upstream_calls.read_resource(resource.target, uri, call)

    async def render(self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext) -> dict[str, Any]:
        return await upstream_calls.get_prompt(prompt.target, arguments, call)


_PYTHON, _STATIC, _UPSTREAM = PythonExecutor(), StaticExecutor(), UpstreamExecutor()

#: The table: the executor of each type of target.
EXECUTORS: dict[type[Any], Executor] = {
    RegisteredTool: _PYTHON,
    RegisteredFunction: _PYTHON,
    StaticBehaviour: _STATIC,
    targets.StaticResourceTarget: _STATIC,
    targets.StaticPromptTarget: _STATIC,
    targets.HttpTarget: HttpExecutor(),
    upstreams.UpstreamToolTarget: _UPSTREAM,
    upstreams.UpstreamResourceTarget: _UPSTREAM,
    upstreams.UpstreamPromptTarget: _UPSTREAM,
}
