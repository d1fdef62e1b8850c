"""The conformance fixtures, registered in code: tools (``@tool``) and prompts (``@prompt``).

Every name and answer here is what ``@modelcontextprotocol/conformance`` asks for or checks, after its reference
"everything" servers; resources and ``json_schema_2020_12_tool`` (whose schema must reach the client verbatim) are
static rows (``setup``). Input from the client is asked for by returning ``InputRequired``; in the handshake era
the runtime asks it in band where the request can carry it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from mcp_app.catalog import prompt, tool
from mcp_app.events import publish_to_servers
from mcp_app.models import McpServer
from mcp_app.protocol.errors import INTERNAL_ERROR, InvalidParams, ProtocolError
from mcp_app.protocol.messages import list_changed
from mcp_app.runtime import InputRequired, ToolContext, ToolError, ToolResult

# A 1x1 PNG and a tiny WAV, as in the reference servers.
PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

STEP_SECONDS = 0.05  # pause between progress or log messages, like the reference servers


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _elicit(message: str, properties: Mapping[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = required
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def _sample(text: str, max_tokens: int = 100) -> dict[str, Any]:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": _text(text)}], "maxTokens": max_tokens},
    }


LIST_ROOTS: dict[str, Any] = {"method": "roots/list", "params": {}}
ASK_NAME = _elicit("What is your name?", {"name": {"type": "string"}}, ["name"])
CONFIRM = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
ASK_COLOUR = _elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])


def _response(ctx: ToolContext, key: str) -> dict[str, Any] | None:
    """The client's answer to input request ``key``: ``None`` if absent; -32602 if it is not an object."""
    if key not in ctx.input_responses:
        return None
    answer = ctx.input_responses[key]
    if not isinstance(answer, dict):
        raise InvalidParams(f'Invalid params: inputResponses["{key}"] must be an object')
    return answer


def _elicited(answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """The content of an accepted elicitation, else ``None`` (declined or cancelled)."""
    content = answer.get("content")
    if answer.get("action") != "accept" or not isinstance(content, dict):
        return None
    return content


def _sampled_text(answer: Mapping[str, Any]) -> str:
    content = answer.get("content")
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return "(no text)"


# --- Content of each kind ----------------------------------------------------------------------------------------
# Tools returning a ToolResult are annotated ``Any``: a return annotation would publish an outputSchema.


@tool(description="Returns a simple text response.")
async def test_simple_text() -> str:
    return "This is a simple text response for testing."


@tool(description="Returns an image (a 1x1 PNG).")
async def test_image_content() -> Any:
    return ToolResult(content=[{"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}])


@tool(description="Returns an audio clip (a short WAV).")
async def test_audio_content() -> Any:
    return ToolResult(content=[{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}])


@tool(description="Returns an embedded text resource.")
async def test_embedded_resource() -> Any:
    resource = {
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    }
    return ToolResult(content=[{"type": "resource", "resource": resource}])


@tool(description="Returns text, an image and an embedded resource in one result.")
async def test_multiple_content_types() -> Any:
    resource = {
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": '{"test":"data","value":123}',
    }
    return ToolResult(
        content=[
            _text("Multiple content types test:"),
            {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"},
            {"type": "resource", "resource": resource},
        ]
    )


@tool(description="Always fails with a tool error (an isError result, not a protocol error).")
async def test_error_handling() -> Any:
    return ToolResult(content=[_text("This tool intentionally returns an error for testing")], is_error=True)


# --- Progress, logging, streams ----------------------------------------------------------------------------------


@tool(description="Reports progress 0, 50 and 100 of 100 (when the call carries a progressToken), then finishes.")
async def test_tool_with_progress(ctx: ToolContext) -> str:
    for progress in (0, 50, 100):
        await ctx.report_progress(progress, 100, f"Completed step {progress} of 100")
        await asyncio.sleep(STEP_SECONDS)
    return "Progress test completed"


@tool(description="Sends three info log messages while it runs (at the level the client asked for).")
async def test_tool_with_logging(ctx: ToolContext) -> str:
    for index, message in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if index:
            await asyncio.sleep(STEP_SECONDS)
        await ctx.log("info", message, logger="test_tool_with_logging")
    return "Logging test completed"


@tool(description="Logs while it runs; log messages reach only clients that asked for a log level.")
async def test_logging_tool(ctx: ToolContext) -> str:
    for message in ("Logging tool started", "Logging tool working", "Logging tool finished"):
        await ctx.log("info", message, logger="test_logging_tool")
    return "Logging tool completed"


@tool(description="Asks the user for input the stateless way (an input-required result, never a request).")
async def test_streaming_elicitation(ctx: ToolContext) -> Any:
    answer = _response(ctx, "user_input")
    content = _elicited(answer) if answer is not None else None
    if content is None:
        return InputRequired(
            requests={"user_input": _elicit("Please provide a value", {"value": {"type": "string"}}, ["value"])}
        )
    return f"Received: {content.get('value')}"


@tool(description="Needs the client's sampling capability; clients without it get error -32021.")
async def test_missing_capability(ctx: ToolContext) -> Any:
    # Asking for a sampling answer is what needs the capability: the runtime refuses a client that did not
    # declare ``sampling`` with -32021 and requiredCapabilities {"sampling": {}} before anything is sent.
    answer = _response(ctx, "sample")
    if answer is None:
        return InputRequired(requests={"sample": _sample("Say something.", 20)})
    return f"Sampled: {_sampled_text(answer)}"


# --- Catalog changes (for subscriptions/listen) ------------------------------------------------------------------


def _bump(server_id: str, kind: str) -> None:
    pks = set(McpServer.objects.filter(server_id=server_id).values_list("pk", flat=True))
    # No content changes: the conformance suite wants the notification itself, which only a publication sends.
    McpServer.objects.bump_catalog_version(pks, (kind,))
    publish_to_servers(pks, list_changed(kind))


@tool(description="Marks this server's tool list changed (listeners get notifications/tools/list_changed).")
def test_trigger_tool_change(ctx: ToolContext) -> str:
    _bump(ctx.server_id, "tools")
    return "Tool list change triggered"


@tool(description="Marks this server's prompt list changed (listeners get notifications/prompts/list_changed).")
def test_trigger_prompt_change(ctx: ToolContext) -> str:
    _bump(ctx.server_id, "prompts")
    return "Prompt list change triggered"


# --- Multi-round-trip requests (2026-07-28, SEP-2322) ------------------------------------------------------------


@tool(description="Asks for the user's name (elicitation), then greets them.")
async def test_input_required_result_elicitation(ctx: ToolContext) -> Any:
    # Stateless about first calls: any call that carries an answer under user_name completes.
    answer = _response(ctx, "user_name")
    if answer is None:
        return InputRequired(requests={"user_name": ASK_NAME})
    content = _elicited(answer)
    if content is None:
        return "The user declined to give a name."
    return f"Hello, {content.get('name')}!"


@tool(description="Asks the client's model a question (sampling), then returns the answer.")
async def test_input_required_result_sampling(ctx: ToolContext) -> Any:
    answer = _response(ctx, "capital_question")
    if answer is None:
        return InputRequired(requests={"capital_question": _sample("What is the capital of France?")})
    return f"The model answered: {_sampled_text(answer)}"


@tool(description="Asks the client for its roots, then lists them.")
async def test_input_required_result_list_roots(ctx: ToolContext) -> Any:
    answer = _response(ctx, "client_roots")
    if answer is None:
        return InputRequired(requests={"client_roots": LIST_ROOTS})
    roots = answer.get("roots")
    uris = [root.get("uri") for root in roots if isinstance(root, dict)] if isinstance(roots, list) else []
    return f"Client roots: {', '.join(map(str, uris)) or '(none)'}"


async def _confirm_with_state(ctx: ToolContext) -> Any:
    answer = _response(ctx, "confirm")
    if answer is None or ctx.state != {"step": "confirm"}:
        return InputRequired(requests={"confirm": CONFIRM}, state={"step": "confirm"})
    content = _elicited(answer) or {}
    return f"state-ok: confirmed={content.get('ok')}"


@tool(description="Asks for a confirmation and hands out signed requestState; completes when it comes back.")
async def test_input_required_result_request_state(ctx: ToolContext) -> Any:
    return await _confirm_with_state(ctx)


@tool(description="Like test_input_required_result_request_state; a tampered requestState is refused (-32602).")
async def test_input_required_result_tampered_state(ctx: ToolContext) -> Any:
    # The runtime verifies the signature before the tool runs: a tampered state never reaches this code.
    return await _confirm_with_state(ctx)


@tool(description="Asks for a name, a sampled greeting and the client's roots at once.")
async def test_input_required_result_multiple_inputs(ctx: ToolContext) -> Any:
    requests = {"user_name": ASK_NAME, "greeting": _sample("Generate a greeting", 50), "client_roots": LIST_ROOTS}
    answers = {key: _response(ctx, key) for key in requests}
    if ctx.state != {"step": "all"} or any(answer is None for answer in answers.values()):
        return InputRequired(requests=requests, state={"step": "all"})
    name = (_elicited(answers["user_name"] or {}) or {}).get("name")
    return f"Name: {name}; greeting: {_sampled_text(answers['greeting'] or {})}; roots received"


@tool(description="Needs two rounds of input (a name, then a colour), each with new requestState.")
async def test_input_required_result_multi_round(ctx: ToolContext) -> Any:
    state = ctx.state if isinstance(ctx.state, dict) else {}
    if state.get("round") == 1:
        answer = _response(ctx, "step1")
        if answer is not None:
            name = (_elicited(answer) or {}).get("name")
            return InputRequired(requests={"step2": ASK_COLOUR}, state={"round": 2, "name": name})
    if state.get("round") == 2:
        answer = _response(ctx, "step2")
        if answer is not None:
            colour = (_elicited(answer) or {}).get("color")
            return f"{state.get('name')} likes {colour}."
        return InputRequired(requests={"step2": ASK_COLOUR}, state=state)
    ask_name = _elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
    return InputRequired(requests={"step1": ask_name}, state={"round": 1})


@tool(description="Asks only for input the client declared it can give (sampling, elicitation, roots).")
async def test_input_required_result_capabilities(ctx: ToolContext) -> Any:
    wanted = {"greeting": _sample("Generate a greeting", 50), "user_name": ASK_NAME, "client_roots": LIST_ROOTS}
    needs = {"greeting": "sampling", "user_name": "elicitation", "client_roots": "roots"}
    allowed = {key: request for key, request in wanted.items() if ctx.client_supports(needs[key])}
    answers = {key: _response(ctx, key) for key in allowed}
    if not allowed or any(answer is None for answer in answers.values()):
        return InputRequired(requests=allowed, state={"asked": sorted(allowed)})
    return f"Received answers for: {', '.join(sorted(answers))}"


# --- Schemas and headers -----------------------------------------------------------------------------------------


@tool(description="Echoes its region, which clients also send as the Mcp-Param-Region header (x-mcp-header).")
async def test_header_param(
    region: Annotated[str, Field(description="A region name.", json_schema_extra={"x-mcp-header": "Region"})],
) -> str:
    return f"Region: {region}"


# --- Handshake-era fixtures (server-to-client requests there; input-required results in 2026-07-28) ------------


@tool(description="Asks the client's model to answer a prompt (sampling) and returns the answer.")
async def test_sampling(ctx: ToolContext, prompt: Annotated[str, Field(description="The prompt to sample.")]) -> Any:
    answer = _response(ctx, "sampling")
    if answer is None:
        return InputRequired(requests={"sampling": _sample(prompt)})
    return f"LLM response: {_sampled_text(answer)}"


@tool(description="Asks the user for a username and an email address (elicitation).")
async def test_elicitation(
    ctx: ToolContext, message: Annotated[str, Field(description="The message to show the user.")]
) -> Any:
    answer = _response(ctx, "user_info")
    if answer is None:
        properties = {
            "username": {"type": "string", "description": "The user's name"},
            "email": {"type": "string", "description": "The user's email address"},
        }
        return InputRequired(requests={"user_info": _elicit(message, properties, ["username", "email"])})
    return f"User response: action={answer.get('action')}, content={answer.get('content')}"


SEP1034_PROPERTIES = {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {
        "type": "string",
        "description": "User status",
        "enum": ["active", "inactive", "pending"],
        "default": "active",
    },
    "verified": {"type": "boolean", "description": "Verification status", "default": True},
}


@tool(description="Elicitation whose schema gives every field a default (SEP-1034).")
async def test_elicitation_sep1034_defaults(ctx: ToolContext) -> Any:
    answer = _response(ctx, "defaults")
    if answer is None:
        return InputRequired(requests={"defaults": _elicit("Please review your information", SEP1034_PROPERTIES)})
    return f"Elicitation completed: action={answer.get('action')}, content={answer.get('content')}"


SEP1330_PROPERTIES = {
    "untitledSingle": {"type": "string", "description": "Pick one", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {
        "type": "string",
        "description": "Pick one (titled)",
        "oneOf": [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ],
    },
    "legacyEnum": {
        "type": "string",
        "description": "Pick one (legacy titles)",
        "enum": ["opt1", "opt2", "opt3"],
        "enumNames": ["Option One", "Option Two", "Option Three"],
    },
    "untitledMulti": {
        "type": "array",
        "description": "Pick several",
        "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
    },
    "titledMulti": {
        "type": "array",
        "description": "Pick several (titled)",
        "items": {
            "anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]
        },
    },
}


@tool(description="Elicitation with every enum variant: untitled, titled, legacy, and multi-select (SEP-1330).")
async def test_elicitation_sep1330_enums(ctx: ToolContext) -> Any:
    answer = _response(ctx, "enums")
    if answer is None:
        return InputRequired(requests={"enums": _elicit("Please choose", SEP1330_PROPERTIES)})
    return f"Elicitation completed: action={answer.get('action')}, content={answer.get('content')}"


@tool(description="Closes its SSE stream mid-call (SEP-1699); the result waits for a GET with Last-Event-ID.")
async def test_reconnection(ctx: ToolContext) -> str:
    await ctx.report_progress(1, 2)
    await ctx.close_stream()
    await asyncio.sleep(STEP_SECONDS)
    await ctx.report_progress(2, 2)
    return "Reconnection test completed"


# --- Prompts -----------------------------------------------------------------------------------------------------


@prompt(description="A simple prompt without arguments.")
def test_simple_prompt() -> list[dict[str, Any]]:
    return [{"role": "user", "content": _text("This is a simple prompt for testing.")}]


@prompt(description="A prompt with two required arguments.")
def test_prompt_with_arguments(
    arg1: Annotated[str, Field(description="First test argument")],
    arg2: Annotated[str, Field(description="Second test argument")],
) -> list[dict[str, Any]]:
    return [{"role": "user", "content": _text(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")}]


@prompt(description="A prompt that embeds a resource.")
def test_prompt_with_embedded_resource(
    resourceUri: Annotated[str, Field(description="URI of the resource to embed")],
) -> list[dict[str, Any]]:
    resource = {"uri": resourceUri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}
    return [
        {"role": "user", "content": {"type": "resource", "resource": resource}},
        {"role": "user", "content": _text("Please process the embedded resource above.")},
    ]


@prompt(description="A prompt that carries an image.")
def test_prompt_with_image() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}},
        {"role": "user", "content": _text("Please analyze the image above.")},
    ]


@prompt(description="A prompt that first asks the user for context (an input-required result).")
async def test_input_required_result_prompt(ctx: ToolContext) -> Any:
    answer = _response(ctx, "user_context")
    content = _elicited(answer) if answer is not None else None
    if content is None:
        ask = _elicit("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
        return InputRequired(requests={"user_context": ask})
    return [{"role": "user", "content": _text(f"Use this context: {content.get('context')}")}]


# Tasks extension (io.modelcontextprotocol/tasks) fixtures, as the suite's tasks-* scenarios expect them.


@tool(description="Greets someone; never runs as a task.")
def greet(name: Annotated[str, Field(description="Who to greet.")]) -> str:
    return f"Hello, {name}!"


@tool(
    description="Computes for a number of seconds; becomes a task when it does not finish at once.",
    task_support="optional",
)
async def slow_compute(
    seconds: Annotated[int, Field(ge=0, le=3600, description="How long to work.")] = 0,
    label: Annotated[str, Field(description="A label echoed in the result.")] = "",
) -> str:
    await asyncio.sleep(seconds)
    return f"slow_compute {label!r} finished after {seconds}s"


@tool(description="A job that always runs as a task and ends with a tool error.", task_support="required")
async def failing_job() -> Any:
    await asyncio.sleep(STEP_SECONDS)
    raise ToolError("failing_job failed on purpose", code="JOB_FAILED", error_type="job_error")


@tool(description="A job that always runs as a task and ends with a protocol error.", task_support="required")
async def protocol_error_job() -> Any:
    await asyncio.sleep(STEP_SECONDS)
    raise ProtocolError("protocol_error_job failed on purpose", code=INTERNAL_ERROR)


@tool(description="Deletes a file after the user confirms; waits for the answer as a task.", task_support="required")
async def confirm_delete(
    ctx: ToolContext, filename: Annotated[str, Field(description="The file to delete.")] = ""
) -> Any:
    key = ctx.state.get("key") if isinstance(ctx.state, dict) else None
    answer = _response(ctx, key) if key else None
    if answer is None:
        key = f"confirm-{secrets.token_hex(4)}"
        request = _elicit(f"Delete {filename}?", {"confirm": {"type": "boolean"}}, ["confirm"])
        return InputRequired(requests={key: request}, state={"key": key}, park=True)
    content = _elicited(answer) or {}
    return f"Deleted {filename}" if content.get("confirm") else f"Kept {filename}"


@tool(description="Asks two questions at once and waits for both answers as a task.", task_support="required")
async def multi_input(ctx: ToolContext) -> Any:
    keys = ctx.state.get("keys") if isinstance(ctx.state, dict) else None
    if not keys or any(_response(ctx, key) is None for key in keys):
        keys = [f"first-{secrets.token_hex(4)}", f"second-{secrets.token_hex(4)}"]
        requests = {
            key: _elicit(f"Question {index + 1}", {"name": {"type": "string"}}) for index, key in enumerate(keys)
        }
        return InputRequired(requests=requests, state={"keys": keys}, park=True)
    names = [(_elicited(_response(ctx, key) or {}) or {}).get("name", "?") for key in keys]
    return f"Answers: {', '.join(names)}"


@tool(description="Asks for a name first (synchronously), then greets as a task.", task_support="required")
async def test_tool_with_task(ctx: ToolContext) -> Any:
    answer = _response(ctx, "user_name")
    if answer is None:
        return InputRequired(requests={"user_name": ASK_NAME}, state={"round": 1})
    await asyncio.sleep(STEP_SECONDS * 10)  # long enough to become a task
    return f"Hello, {(_elicited(answer) or {}).get('name', 'stranger')}!"
