"""The federation harness itself, proved with the official SDK client and no mcp-host in between.

Each test drives a real ``upstream_server`` process (both modes) with ``mcp.Client`` in both eras (``auto``
negotiates 2026-07-28 against both modes, ``legacy`` the 2025-11-25 handshake) and asserts what the federation
tests will rely on: the entries listed, calls answered, progress and logs received, a cancellation seen by the
upstream tool (and its ``finished`` never recorded), elicitation and sampling round trips, ``tools/list_changed``
delivered where the SDK delivers it, resources and prompts read, and the down and silent URLs failing fast; and,
at the wire, the 2026-07-28 ``input_required`` round trip a relay has to carry.
A row that the SDK cannot serve (the stateless handshake has no back-channel and no standalone stream) is
asserted as the limitation it is, so a change in the SDK shows here first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    LoggingMessageNotificationParams,
    TextContent,
    ToolListChangedNotification,
)

from tests.federation.upstream_server import UpstreamProcess
from tests.helpers import LEGACY, MODERN, modern_body, routing_headers

WIRE = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
BOUND_SECONDS = 5.0  # every wait here: generous on a loaded 2-core machine, short on a hang

ERAS = pytest.mark.parametrize(("client_mode", "era"), [("auto", MODERN), ("legacy", LEGACY)], ids=["2026", "2025"])


def text_of(result: Any) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


def no_back_channel(upstream: UpstreamProcess, era: str) -> bool:
    """The stateless handshake serves each POST on a fresh transport: nothing can reach the client mid-call."""
    return upstream.mode == "stateless" and era == LEGACY


@ERAS
async def test_auto_negotiates_2026_and_legacy_the_handshake(
    upstream: UpstreamProcess, client_mode: str, era: str
) -> None:
    async with Client(upstream.url, mode=client_mode) as client:
        assert client.protocol_version == era


@ERAS
async def test_entries_are_listed(upstream: UpstreamProcess, client_mode: str, era: str) -> None:
    async with Client(upstream.url, mode=client_mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        resources = [resource.uri for resource in (await client.list_resources()).resources]
        templates = [template.uri_template for template in (await client.list_resource_templates()).resource_templates]
        prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}

    assert {"echo", "add", "slow", "ask_name", "summarize", "fail", "grow"} <= tools.keys()
    assert tools["echo"].input_schema["required"] == ["text"]
    assert tools["add"].output_schema is not None
    assert resources == ["note://readme"]
    assert templates == ["note://items/{id}"]
    assert [argument.name for argument in prompts["greet"].arguments or []] == ["name"]


@ERAS
async def test_calls_answer_and_errors_are_results(upstream: UpstreamProcess, client_mode: str, era: str) -> None:
    async with Client(upstream.url, mode=client_mode) as client:
        echoed = await client.call_tool("echo", {"text": "héllo"})
        added = await client.call_tool("add", {"a": 2, "b": 3})
        failed = await client.call_tool("fail", {})
        unknown = await client.call_tool("no_such_tool", {})

    assert (text_of(echoed), echoed.is_error) == ("héllo", False)
    assert added.structured_content == {"result": 5}
    assert failed.is_error and "upstream tool failed" in text_of(failed)
    assert unknown.is_error and "no_such_tool" in text_of(unknown)


@ERAS
async def test_progress_and_logs_reach_the_client(
    upstream: UpstreamProcess, client_mode: str, era: str, unique_tag: str
) -> None:
    reported: list[tuple[float, float | None, str | None]] = []
    logs: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    # log_level opts this client's requests in to logs (the 2026-07-28 rule; the handshake era sends them anyway).
    async with Client(upstream.url, mode=client_mode, logging_callback=on_log, log_level="info") as client:
        result = await client.call_tool(
            "slow", {"steps": 3, "delay": 0.01, "tag": unique_tag}, progress_callback=on_progress
        )

    assert text_of(result) == "done 3"
    assert reported == [(1, 3, "step 1/3"), (2, 3, "step 2/3"), (3, 3, "step 3/3")]
    assert logs == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert await upstream.await_event("finished", unique_tag)


@ERAS
async def test_cancelling_the_call_stops_the_upstream_tool(
    upstream: UpstreamProcess, client_mode: str, era: str, unique_tag: str
) -> None:
    async with Client(upstream.url, mode=client_mode) as client:
        call = asyncio.create_task(client.call_tool("slow", {"steps": 200, "delay": 0.05, "tag": unique_tag}))
        assert await upstream.await_event("started", unique_tag)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Short: in the one row where it must not happen, this wait runs to its bound.
        cancelled_while_connected = await upstream.await_event("cancelled", unique_tag, timeout=1.0)

    if no_back_channel(upstream, era):
        # notifications/cancelled arrives on a fresh transport that knows nothing of the call, and the SDK client
        # keeps the call's POST open: only closing the client (its HTTP connections) stops the tool.
        assert not cancelled_while_connected
        assert await upstream.await_event("cancelled", unique_tag)
    else:
        assert cancelled_while_connected
    assert ("finished", unique_tag) not in upstream.events()


@ERAS
@pytest.mark.parametrize(
    ("action", "answer"), [("accept", "hello Ada"), ("decline", "declined"), ("cancel", "cancelled")]
)
async def test_an_elicitation_reaches_the_client_and_its_answer_the_tool(
    upstream: UpstreamProcess, client_mode: str, era: str, action: str, answer: str
) -> None:
    asked: list[ElicitRequestParams] = []

    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action=action, content={"name": "Ada"} if action == "accept" else None)  # type: ignore[arg-type]

    async with Client(upstream.url, mode=client_mode, elicitation_callback=elicit) as client:
        if no_back_channel(upstream, era):
            with pytest.raises(MCPError, match="no back-channel"):
                await client.call_tool("ask_name", {})
            return
        result = await client.call_tool("ask_name", {})

    assert (text_of(result), result.is_error) == (answer, False)
    [request] = asked
    assert isinstance(request, ElicitRequestFormParams)
    assert request.message == "What is your name?"
    assert request.requested_schema["properties"]["name"]["type"] == "string"


@ERAS
async def test_a_sampling_request_reaches_the_client_and_its_answer_the_tool(
    upstream: UpstreamProcess, client_mode: str, era: str
) -> None:
    sampled: list[CreateMessageRequestParams] = []

    async def sample(context: ClientRequestContext, params: CreateMessageRequestParams) -> CreateMessageResult:
        sampled.append(params)
        return CreateMessageResult(role="assistant", content=TextContent(text="a summary"), model="test-model")

    async with Client(upstream.url, mode=client_mode, sampling_callback=sample) as client:
        if no_back_channel(upstream, era):
            with pytest.raises(MCPError, match="no back-channel"):
                await client.call_tool("summarize", {"text": "long text"})
            return
        result = await client.call_tool("summarize", {"text": "long text"})

    assert (text_of(result), result.is_error) == ("a summary", False)
    [request] = sampled
    assert request.messages[0].content == TextContent(text="Summarize: long text")
    assert request.max_tokens == 50


@pytest.mark.parametrize(
    ("tool", "arguments", "method", "response", "answer"),
    [
        ("ask_name", {}, "elicitation/create", {"action": "accept", "content": {"name": "Ada"}}, "hello Ada"),
        (
            "summarize",
            {"text": "x"},
            "sampling/createMessage",
            {"role": "assistant", "content": {"type": "text", "text": "short"}, "model": "m"},
            "short",
        ),
    ],
    ids=["elicit", "sample"],
)
async def test_2026_input_required_on_the_wire(
    upstream: UpstreamProcess,
    tool: str,
    arguments: dict[str, Any],
    method: str,
    response: dict[str, Any],
    answer: str,
) -> None:
    """What a relay sees without the SDK client: one ``input_required`` result, then the retry that completes it."""
    capabilities: dict[str, Any] = {"elicitation": {"form": {}}, "sampling": {}}
    body = modern_body("tools/call", {"name": tool, "arguments": arguments}, capabilities=capabilities)
    async with httpx.AsyncClient(timeout=BOUND_SECONDS) as http:
        first = (await http.post(upstream.url, json=body, headers=WIRE | routing_headers(body))).json()["result"]
        assert first["resultType"] == "input_required"
        [(key, request)] = first["inputRequests"].items()
        assert request["method"] == method
        assert isinstance(first["requestState"], str)

        body["params"] |= {"inputResponses": {key: response}, "requestState": first["requestState"]}
        second = (await http.post(upstream.url, json=body, headers=WIRE | routing_headers(body))).json()["result"]

    assert second["resultType"] == "complete"
    assert second["content"] == [{"type": "text", "text": answer}]
    assert second["isError"] is False


@ERAS
async def test_a_client_without_the_capability_gets_an_error(
    upstream: UpstreamProcess, client_mode: str, era: str
) -> None:
    async with Client(upstream.url, mode=client_mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ask_name", {})

    if no_back_channel(upstream, era):
        assert "no back-channel" in raised.value.error.message
    else:
        assert raised.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_handshake_sessions_are_told_of_a_new_tool(stateful_upstream: UpstreamProcess, unique_tag: str) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    async with Client(stateful_upstream.url, mode="legacy", message_handler=on_message) as client:
        await client.list_tools()
        await stateful_upstream.add_tool_async(f"grown_{unique_tag}")
        await asyncio.wait_for(changed.wait(), BOUND_SECONDS)
        tools = [tool.name for tool in (await client.list_tools()).tools]
        grown = await client.call_tool(f"grown_{unique_tag}", {"text": "again"})

    assert f"grown_{unique_tag}" in tools
    assert text_of(grown) == "again"


async def test_the_grow_tool_tells_its_own_session(stateful_upstream: UpstreamProcess, unique_tag: str) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    async with Client(stateful_upstream.url, mode="legacy", message_handler=on_message) as client:
        await client.list_tools()
        assert text_of(await client.call_tool("grow", {"name": f"grown_{unique_tag}"})) == f"added grown_{unique_tag}"
        await asyncio.wait_for(changed.wait(), BOUND_SECONDS)


async def test_2026_listeners_are_told_of_a_new_tool(upstream: UpstreamProcess, unique_tag: str) -> None:
    async with Client(upstream.url) as client, client.listen(tools_list_changed=True) as subscription:
        assert subscription.honored.tools_list_changed
        await upstream.add_tool_async(f"grown_{unique_tag}")
        event = await asyncio.wait_for(anext(aiter(subscription)), BOUND_SECONDS)
        tools = [tool.name for tool in (await client.list_tools()).tools]

    assert type(event).__name__ == "ToolsListChanged"
    assert f"grown_{unique_tag}" in tools


async def test_stateless_handshake_sees_a_new_tool_on_the_next_list(
    stateless_upstream: UpstreamProcess, unique_tag: str
) -> None:
    async with Client(stateless_upstream.url, mode="legacy") as client:
        await client.list_tools()
        await stateless_upstream.add_tool_async(f"grown_{unique_tag}")
        tools = [tool.name for tool in (await client.list_tools()).tools]

    assert f"grown_{unique_tag}" in tools


@ERAS
async def test_resources_and_prompts_are_read(upstream: UpstreamProcess, client_mode: str, era: str) -> None:
    async with Client(upstream.url, mode=client_mode) as client:
        readme = await client.read_resource("note://readme")
        item = await client.read_resource("note://items/7")
        prompt = await client.get_prompt("greet", {"name": "Bo"})

    assert [content.text for content in readme.contents] == ["upstream readme"]  # type: ignore[union-attr]
    assert [content.text for content in item.contents] == ["item 7"]  # type: ignore[union-attr]
    assert prompt.messages[0].content == TextContent(text="Please greet Bo.")


async def test_a_private_upstream_goes_down_and_comes_back(upstream_server: Callable[[str], UpstreamProcess]) -> None:
    private = upstream_server("stateful")
    private.add_tool("only_here")
    private.stop()
    with pytest.raises(Exception):  # noqa: B017 (whatever the SDK raises for a refused connection)
        async with asyncio.timeout(BOUND_SECONDS), Client(private.url, mode="legacy"):
            pass
    private.start()  # same port, fresh process: the runtime tool is gone
    async with Client(private.url, mode="legacy") as client:
        assert "only_here" not in [tool.name for tool in (await client.list_tools()).tools]


async def test_the_down_url_refuses_at_once(down_url: str) -> None:
    with pytest.raises(Exception):  # noqa: B017
        async with asyncio.timeout(BOUND_SECONDS), Client(down_url):
            pass


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups: the SDK client raises its errors from task groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


async def test_the_silent_url_times_out_a_handshake_at_the_read_timeout(silent_url: str) -> None:
    with pytest.raises(BaseException) as raised:
        async with asyncio.timeout(BOUND_SECONDS), Client(silent_url, mode="legacy", read_timeout_seconds=0.5):
            pass

    [error] = leaves(raised.value)
    assert isinstance(error, MCPError) and "timed out" in error.error.message


async def test_the_silent_url_holds_an_auto_probe_past_the_read_timeout(silent_url: str) -> None:
    # The SDK's server/discover probe has its own 10 s timeout (DISCOVER_TIMEOUT_SECONDS) and ignores
    # read_timeout_seconds: whoever connects in auto mode must bound the connect itself.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0), Client(silent_url, read_timeout_seconds=0.5):
            pass
