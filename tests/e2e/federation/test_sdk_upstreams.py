"""The official SDK's ``MCPServer`` as an upstream (stateful and stateless), federated through a real daphne.

The SDK's server speaks 2026-07-28, so mcp-host's pooled client negotiates that era with it: elicitation and
sampling come back as ``input_required``, which mcp-host answers through a handshake-era client in-band or
hands to a stateless client as its own ``input_required``; list changes arrive on ``subscriptions/listen``.
Every test runs against both server modes, and clients of both eras where the behaviour differs by era.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest

from tests.conftest import Access
from tests.e2e.conftest import Daphne
from tests.e2e.federation.conftest import WAIT_SECONDS, answering, sdk, texts
from tests.federation.upstream_server import UpstreamProcess

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
ERAS = ["legacy", MODERN]
BASE_TOOLS = {"sdk_echo", "sdk_add", "sdk_slow", "sdk_ask_name", "sdk_summarize", "sdk_fail", "sdk_grow"}


@pytest.fixture
def federated(
    federating_daphne: Daphne,
    upstream: UpstreamProcess,
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],
) -> Access:
    access = access_factory(tools=())
    federate(access, upstream.url, prefix="sdk_", name=f"sdk-{upstream.mode}")
    return access


@pytest.mark.parametrize("mode", ERAS)
async def test_every_kind_of_entry_is_imported_under_the_prefix_and_served(
    federating_daphne: Daphne, federated: Access, mode: str
) -> None:
    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode=mode) as client:
        tools = await client.list_tools()
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompts = await client.list_prompts()
        added = await client.call_tool("sdk_add", {"a": 2, "b": 40})
        readme = await client.read_resource("note://readme")
        item = await client.read_resource("note://items/7")
        prompt = await client.get_prompt("sdk_greet", {"name": "Ada"})

    assert {tool.name for tool in tools.tools} >= BASE_TOOLS
    assert [resource.uri for resource in resources.resources] == ["note://readme"]
    assert [template.uri_template for template in templates.resource_templates] == ["note://items/{id}"]
    assert [prompt.name for prompt in prompts.prompts] == ["sdk_greet"]
    assert added.structured_content == {"result": 42}
    assert [content.text for content in readme.contents] == ["upstream readme"]  # type: ignore[union-attr]
    assert [content.text for content in item.contents] == ["item 7"]  # type: ignore[union-attr]
    assert "Ada" in prompt.messages[0].content.text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_is_relayed(federating_daphne: Daphne, federated: Access, mode: str, unique_tag: str) -> None:
    updates: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total))

    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode=mode) as client:
        result = await client.call_tool(
            "sdk_slow", {"steps": 3, "delay": 0.01, "tag": unique_tag}, progress_callback=on_progress
        )

    assert result.is_error is False
    assert updates == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_cancellation_stops_the_upstream_tool(
    federating_daphne: Daphne, federated: Access, upstream: UpstreamProcess, mode: str, unique_tag: str
) -> None:
    async with sdk(federating_daphne.url, federated, mode=mode) as client:
        call = asyncio.ensure_future(client.call_tool("sdk_slow", {"steps": 100, "delay": 0.1, "tag": unique_tag}))
        assert await upstream.await_event("started", unique_tag, timeout=WAIT_SECONDS)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await upstream.await_event("cancelled", unique_tag, timeout=WAIT_SECONDS)

    assert ("finished", unique_tag) not in upstream.events()


@pytest.mark.parametrize("mode", ERAS)
async def test_an_upstream_elicitation_reaches_the_client_and_its_answer_the_tool(
    federating_daphne: Daphne, federated: Access, mode: str
) -> None:
    asked, answer = answering(name="Ada")

    async with (
        asyncio.timeout(WAIT_SECONDS),
        sdk(federating_daphne.url, federated, mode=mode, elicitation_callback=answer) as client,
    ):
        result = await client.call_tool("sdk_ask_name", {})

    assert len(asked) == 1
    assert texts(result) == ["hello Ada"]


@pytest.mark.parametrize("mode", ERAS)
async def test_an_upstream_sampling_request_reaches_the_client_and_its_answer_the_tool(
    federating_daphne: Daphne, federated: Access, mode: str
) -> None:
    prompts: list[str] = []

    async def complete(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        prompts.append(params.messages[0].content.text)  # type: ignore[union-attr]
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="a short summary"), model="test-model"
        )

    async with (
        asyncio.timeout(WAIT_SECONDS),
        sdk(federating_daphne.url, federated, mode=mode, sampling_callback=complete) as client,
    ):
        result = await client.call_tool("sdk_summarize", {"text": "a long text"})

    assert prompts == ["Summarize: a long text"]
    assert texts(result) == ["a short summary"]


async def test_a_stateless_client_gets_the_upstreams_input_request_as_its_own(
    federating_daphne: Daphne, federated: Access
) -> None:
    async with (
        asyncio.timeout(WAIT_SECONDS),
        sdk(federating_daphne.url, federated, mode=MODERN, elicitation_callback=_accept) as client,
    ):
        first = await client.session.call_tool("sdk_ask_name", {}, allow_input_required=True)

    assert isinstance(first, types.InputRequiredResult)
    requests = list((first.input_requests or {}).values())
    assert [request.method for request in requests] == ["elicitation/create"]
    assert first.request_state  # signed by mcp-host, the upstream's own state inside


async def _accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "x"})


async def test_an_upstream_list_change_reaches_a_connected_client(
    federating_daphne: Daphne, federated: Access, upstream: UpstreamProcess, unique_tag: str
) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    name = f"grown_{unique_tag}"
    async with sdk(federating_daphne.url, federated, mode="legacy", message_handler=on_message) as client:
        await client.call_tool("sdk_echo", {"text": "open the pooled connection"})
        await upstream.add_tool_async(name)
        async with asyncio.timeout(WAIT_SECONDS):
            await changed.wait()
            listed = await client.list_tools()

    assert f"sdk_{name}" in {tool.name for tool in listed.tools}
