"""The inline tool runner: validate arguments, invoke the tool, turn what it returns into a ``CallToolResult``.

Targets (``definitions.targets``) are what the catalog resolves a tool to: a ``PythonTarget`` (a registered
function), a ``StaticTarget`` (a canned answer) or an ``HttpTarget`` (a tenant's webhook, run by
``runtime.webhooks``). Arguments are validated before anything runs. A ``ToolError`` becomes an
``isError`` result with its message; any other exception is logged and becomes an ``isError`` result with a
generic message, so no internals leak to the client.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import orjson
import pydantic
from jsonschema import Draft202012Validator

from ..definitions.context import InputRequired, ToolError, ToolResult
from ..definitions.patterns import schema_validator
from ..definitions.prompts import fill_placeholders, render_static_prompt
from ..definitions.targets import (
    FunctionTarget,
    HttpTarget,
    PythonTarget,
    StaticPromptTarget,
    StaticResourceTarget,
    StaticTarget,
)
from ..definitions.upstreams import UpstreamPromptTarget, UpstreamResourceTarget, UpstreamToolTarget
from ..federation import calls as upstream_calls
from ..observability import metrics, tracing
from ..protocol.context import CallContext, InvalidToolArguments
from ..protocol.descriptors import PromptDescriptor, ResourceDescriptor, ToolDescriptor
from ..protocol.errors import InvalidParams, ProtocolError
from ..protocol.modern import runs_as_task
from ..protocol.versions import LEGACY
from .invocation import answer_in_band, invoke, run_tool, tool_context
from .mrtr import input_required_result, verify_state
from .webhooks import call_webhook

if TYPE_CHECKING:
    from ..definitions.registry import RegisteredTool

logger = logging.getLogger("mcp_app.runtime")


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _error_result(message: str, code: str, error_type: str) -> dict[str, Any]:
    """An ``isError`` result: a sentence for the model, then ``{code, message, error_type}`` for programs."""
    detail = {"code": code, "message": message, "error_type": error_type}
    return {"content": [_text(message), _text(orjson.dumps(detail).decode())], "isError": True}


def _describe_validation_error(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


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
        return result
    if registered.output_adapter is not None:
        if _holds_non_finite(value):
            # JSON numbers are finite (RFC 8259 §6): pydantic would write null, against the output schema.
            return _error_result(
                "The result is not a finite number (infinity or NaN), which JSON cannot carry.",
                "NON_FINITE_NUMBER",
                "invalid_result",
            )
        data = registered.output_adapter.dump_python(value, mode="json")
        structured = {"result": data} if registered.wraps_output else data
        return {"content": [_text(orjson.dumps(data).decode())], "structuredContent": structured}
    if value is None:
        return {"content": []}
    if isinstance(value, str):
        return {"content": [_text(value)]}
    data = pydantic.TypeAdapter(Any).dump_python(value, mode="json")
    return {"content": [_text(orjson.dumps(data).decode())]}


class InlineRunner:
    """Runs tool calls in the serving process (the embedded default)."""

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """Run the call and record its duration and outcome (``mcp_tool_call_duration_seconds``), in an
        ``execute_tool`` span when tracing is on (here, or on the worker that runs a worker call)."""
        tracer = tracing.active()
        if tracer is not None:
            return await tracer.tool_call(tool, call, self._measured_call(tool, arguments, call))
        return await self._measured_call(tool, arguments, call)

    async def _measured_call(
        self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        started = time.perf_counter()
        outcome = "exception"
        try:
            result = await self._call_tool(tool, arguments, call)
            outcome = "tool_error" if result.get("isError") else "ok"
            return result
        except InvalidToolArguments:
            outcome = "invalid_arguments"
            raise
        except ProtocolError:
            outcome = "protocol_error"
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            metrics.record_tool_call(tool.name, outcome, time.perf_counter() - started)

    async def _call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        if runs_as_task(tool, call):
            from .tasks import call_maybe_as_task

            return await call_maybe_as_task(self, tool, arguments, call)
        result = await self._call(tool, arguments, call)
        if "structuredContent" in result and not any(
            block.get("type") == "text" for block in result.get("content", ())
        ):
            # Clients without structured-output support read the text: serialise the structure there too.
            result = {
                **result,
                "content": [*result.get("content", ()), _text(orjson.dumps(result["structuredContent"]).decode())],
            }
        if tool.output_schema and "structuredContent" in result and not result.get("isError"):
            problems = list(_output_validator(tool).iter_errors(result["structuredContent"]))
            if problems:
                # The server must conform to its published outputSchema: a non-conforming answer is a failure.
                logger.error(
                    "tool %s returned structuredContent against its outputSchema: %s", tool.name, problems[0].message
                )
                return _error_result(
                    f"Tool {tool.name} returned a result that does not match its output schema",
                    "INVALID_OUTPUT",
                    "internal_error",
                )
        return result

    async def _call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        target = tool.target
        if isinstance(target, StaticTarget):
            validate_arguments(tool, arguments)
            return await target.behaviour.answer(arguments, call.progress.report)
        if isinstance(target, HttpTarget):
            validate_arguments(tool, arguments)
            return await call_webhook(target, tool.name, arguments, call)
        if isinstance(target, UpstreamToolTarget):
            validate_arguments(tool, arguments)
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
        if isinstance(target, PythonTarget):
            return await self._call_python(tool, target.registered, arguments, call)
        raise TypeError(f"tool {tool.name!r} has no runnable target")

    async def _call_python(
        self, tool: ToolDescriptor, registered: RegisteredTool, arguments: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        model = _validated(registered, arguments)
        kwargs = {name: getattr(model, name) for name in type(model).model_fields}
        state = verify_state(call, tool.name)
        if registered.context_parameter:
            kwargs[registered.context_parameter] = tool_context(call, state)
        try:
            value = await run_tool(registered, kwargs)
            rounds = 0
            while isinstance(value, InputRequired) and call.request.era == LEGACY and call.outbound.can_request:
                # Handshake era: carry the tool's input requests out as server-to-client requests on this call's
                # stream, then run it again with the answers, so one tool serves both eras.
                rounds += 1
                if rounds > MAX_INPUT_ROUNDS:
                    raise ToolError(f"Tool {tool.name} asked for input more than {MAX_INPUT_ROUNDS} times")
                kwargs = await answer_in_band(registered, kwargs, call, value)
                value = await run_tool(registered, kwargs)
            if isinstance(value, InputRequired):
                return input_required_result(call, tool.name, value)
            return python_result(registered, value)
        except ToolError as exc:
            return _error_result(exc.message or f"Tool {tool.name} failed", exc.code, exc.error_type)
        except ProtocolError:
            raise
        except Exception:
            logger.exception("tool %s raised", tool.name)
            return _error_result(f"Tool {tool.name} failed with an internal error", "INTERNAL_ERROR", "internal_error")

    async def read_resource(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        target = resource.target
        if isinstance(target, UpstreamResourceTarget):
            return await upstream_calls.read_resource(target, uri, call)
        content: dict[str, Any] = {"uri": uri}
        if resource.mime_type:
            content["mimeType"] = resource.mime_type
        if isinstance(target, StaticResourceTarget):
            if target.blob:
                content["blob"] = target.blob
            else:
                content["text"] = fill_placeholders(target.text, variables) if resource.is_template else target.text
            return {"contents": [content]}
        if isinstance(target, FunctionTarget):
            value = await invoke(target.registered, dict(variables), call, None)
            if isinstance(value, bytes):
                content["blob"] = base64.b64encode(value).decode()
            elif isinstance(value, str):
                content["text"] = value
            else:
                raise TypeError(f"resource function {target.registered.name} returned {type(value).__name__}")
            return {"contents": [content]}
        raise TypeError(f"resource {resource.uri!r} has no readable target")

    async def get_prompt(
        self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        target = prompt.target
        if isinstance(target, UpstreamPromptTarget):
            return await upstream_calls.get_prompt(target, arguments, call)
        result: dict[str, Any] = {}
        if prompt.description:
            result["description"] = prompt.description
        if isinstance(target, StaticPromptTarget):
            result["messages"] = render_static_prompt(target.messages, arguments)
            return result
        if isinstance(target, FunctionTarget):
            known = {name for name, _description, _required in target.registered.parameters}
            unknown = sorted(set(arguments) - known)
            if unknown:
                raise InvalidParams(f"Unknown argument(s) for prompt {prompt.name}: {', '.join(unknown)}")
            salt_name = f"prompt:{prompt.name}"
            state = verify_state(call, salt_name)
            value = await invoke(target.registered, dict(arguments), call, state)
            if isinstance(value, InputRequired):
                return input_required_result(call, salt_name, value)
            if isinstance(value, str):
                result["messages"] = [{"role": "user", "content": _text(value)}]
            elif isinstance(value, list):
                result["messages"] = value
            else:
                raise TypeError(f"prompt function {target.registered.name} returned {type(value).__name__}")
            return result
        raise TypeError(f"prompt {prompt.name!r} has no target")


MAX_INPUT_ROUNDS = 8


def _output_validator(tool: ToolDescriptor) -> Draft202012Validator:
    return _schema_validator(orjson.dumps(tool.output_schema, option=orjson.OPT_SORT_KEYS))


@functools.lru_cache(maxsize=1024)
def _schema_validator(schema_json: bytes) -> Draft202012Validator:
    """Compiled validators, shared by every tool publishing the same schema."""
    return schema_validator(orjson.loads(schema_json))


def validate_arguments(tool: ToolDescriptor, arguments: dict[str, Any]) -> None:
    """Check ``arguments`` against the tool's input schema, as the inline runner does before it runs a call and
    the routing runner before it records or queues one; raises ``InvalidToolArguments`` with every problem."""
    target = tool.target
    if isinstance(target, PythonTarget):
        _validated(target.registered, arguments)
    elif isinstance(target, StaticTarget | HttpTarget | UpstreamToolTarget):
        errors = sorted(target.validator.iter_errors(arguments), key=lambda error: list(error.path))
        if errors:
            raise InvalidToolArguments("; ".join(_describe_schema_error(error) for error in errors))


def _validated(registered: RegisteredTool, arguments: dict[str, Any]) -> pydantic.BaseModel:
    try:
        # Strict JSON-mode validation matches the published schema: "2" is not a number and true is not an
        # integer, while an integer still satisfies "number" and ISO strings still parse into dates.
        return registered.input_model.model_validate_json(orjson.dumps(arguments), strict=True)
    except pydantic.ValidationError as exc:
        raise InvalidToolArguments(_describe_validation_error(exc)) from exc


def _describe_schema_error(error: Any) -> str:
    location = ".".join(str(part) for part in error.absolute_path) or "arguments"
    return f"{location}: {error.message}"


# The former name, kept for projects that import it.
Runner = InlineRunner
