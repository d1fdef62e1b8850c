"""The official MCP Python SDK in ``mode="legacy"`` using every handshake-era feature against a daphne process.

One server exposes the demo tools, a static text resource, a URI template and a static prompt with argument
completions (``tests/e2e/features.py``). The SDK initializes a session, lists and calls tools (with progress
callbacks), lists and reads resources (static and template), lists and gets the prompt, completes a prompt
argument, and closes, which sends DELETE for its session. The httpx2 client records every exchange through a
response event hook, so the session id, the negotiated version header and the DELETE are asserted at the wire;
afterwards a request carrying the terminated session id must get 404.

Not covered here: the stateless revision and the ``auto`` mode (``test_sdk_client.py``), the TypeScript SDK
(``test_ts_sdk_client.py``), exact frames (``test_wire.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import PromptReference, ResourceTemplateReference, TextContent, TextResourceContents

from mcp_app.protocol.versions import V2025_11_25
from tests.conftest import Access
from tests.e2e.features import (
    ITEM_MIME,
    ITEM_TEMPLATE,
    PROMPT_DESCRIPTION,
    PROMPT_NAME,
    README_MIME,
    README_TEXT,
    README_URI,
    TOOLS,
    build_feature_access,
    item_text,
    rendered_prompt,
    style_completions,
)

pytestmark = pytest.mark.e2e

WAIT_SECONDS = 10.0
PROGRESS_STEPS = 3


@dataclass(frozen=True)
class Exchange:
    """One HTTP exchange as the httpx2 client saw it."""

    http_method: str
    rpc: str | None
    sent_session_id: str | None
    sent_protocol_version: str | None
    status: int
    received_session_id: str | None
    content_type: str | None


@dataclass
class Recorder:
    """An httpx2 response hook keeping every exchange, in the order the responses arrived."""

    exchanges: list[Exchange] = field(default_factory=list)

    async def __call__(self, response: httpx2.Response) -> None:
        request = response.request
        rpc = None
        if request.method == "POST" and request.content:
            body = json.loads(request.content)
            rpc = body.get("method") if isinstance(body, dict) else None
        self.exchanges.append(
            Exchange(
                http_method=request.method,
                rpc=rpc,
                sent_session_id=request.headers.get("mcp-session-id"),
                sent_protocol_version=request.headers.get("mcp-protocol-version"),
                status=response.status_code,
                received_session_id=response.headers.get("mcp-session-id"),
                content_type=response.headers.get("content-type"),
            )
        )

    @property
    def session_id(self) -> str | None:
        return next((item.received_session_id for item in self.exchanges if item.received_session_id), None)


@pytest.fixture
def feature_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    """Tools, resources, a template and a prompt on one server, committed so that daphne sees them."""
    return build_feature_access(access_factory)


def _url(daphne_url: str, access: Access) -> str:
    return f"{daphne_url}{access.path}?{access.query}"


@asynccontextmanager
async def connect(daphne_url: str, access: Access, recorder: Recorder | None = None) -> AsyncIterator[Client]:
    """A legacy-mode SDK client; leaving the block closes it (DELETE) before the HTTP client closes."""
    hooks: dict[str, list[Callable[..., Any]]] = {"response": [recorder]} if recorder is not None else {}
    headers = {"Authorization": f"Bearer {access.raw_token}"}
    async with httpx2.AsyncClient(headers=headers, event_hooks=hooks, timeout=WAIT_SECONDS) as http_client:
        transport = streamable_http_client(_url(daphne_url, access), http_client=http_client)
        async with Client(transport, mode="legacy", read_timeout_seconds=WAIT_SECONDS) as client:
            yield client


async def test_session_from_initialize_to_delete(daphne_url: str, feature_access: Access) -> None:
    recorder = Recorder()
    async with asyncio.timeout(WAIT_SECONDS):
        async with connect(daphne_url, feature_access, recorder) as client:
            assert client.protocol_version == V2025_11_25
            capabilities = client.server_capabilities
            assert capabilities.tools is not None
            assert capabilities.resources is not None
            assert capabilities.prompts is not None
            assert capabilities.completions is not None
            await client.list_tools()

        session_id = recorder.session_id
        assert session_id, "initialize did not issue an Mcp-Session-Id"
        # The GET stream the SDK opens may or may not have answered before the close; it is not asserted.
        posts_and_delete = [
            (item.http_method, item.rpc, item.status) for item in recorder.exchanges if item.http_method != "GET"
        ]
        assert posts_and_delete == [
            ("POST", "initialize", 200),
            ("POST", "notifications/initialized", 202),
            ("POST", "tools/list", 200),
            ("DELETE", None, 204),
        ]
        initialize, *later = [item for item in recorder.exchanges if item.http_method != "GET"]
        assert (initialize.sent_session_id, initialize.received_session_id) == (None, session_id)
        assert {(item.sent_session_id, item.sent_protocol_version) for item in later} == {(session_id, V2025_11_25)}

        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {
            "Authorization": f"Bearer {feature_access.raw_token}",
            "Accept": "application/json, text/event-stream",
            "Mcp-Session-Id": session_id,
            "MCP-Protocol-Version": V2025_11_25,
        }
        async with httpx2.AsyncClient(timeout=WAIT_SECONDS) as http_client:
            after = await http_client.post(_url(daphne_url, feature_access), json=ping, headers=headers)
    assert after.status_code == 404, after.text


async def test_tools_list_call_and_progress(daphne_url: str, feature_access: Access) -> None:
    updates: list[tuple[float, float | None, str | None]] = []
    all_arrived = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))
        if len(updates) == PROGRESS_STEPS:
            all_arrived.set()

    recorder = Recorder()
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, feature_access, recorder) as client:
        tools = await client.list_tools()
        echoed = await client.call_tool("echo", {"text": "hello legacy"})
        progressed = await client.call_tool("progress_demo", {"steps": PROGRESS_STEPS}, progress_callback=on_progress)
        # The SDK runs progress callbacks as tasks of their own: they may finish after the result arrives.
        await all_arrived.wait()

    assert [tool.name for tool in tools.tools] == list(TOOLS)
    assert echoed.is_error is False
    assert [(block.type, block.text) for block in echoed.content if isinstance(block, TextContent)] == [
        ("text", "hello legacy")
    ]
    assert progressed.is_error is False
    assert [block.text for block in progressed.content if isinstance(block, TextContent)] == [
        f"Completed {PROGRESS_STEPS} steps."
    ]
    assert updates == [
        (float(step), float(PROGRESS_STEPS), f"step {step} of {PROGRESS_STEPS}")
        for step in range(1, PROGRESS_STEPS + 1)
    ]
    [progress_call] = [item for item in recorder.exchanges if item.rpc == "tools/call"][1:]
    assert progress_call.content_type is not None
    assert progress_call.content_type.startswith("text/event-stream")


async def test_resources_static_and_template(daphne_url: str, feature_access: Access) -> None:
    item_uri = ITEM_TEMPLATE.replace("{item_id}", "42")
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, feature_access) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        readme = await client.read_resource(README_URI)
        item = await client.read_resource(item_uri)
        template_completion = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri=ITEM_TEMPLATE), {"name": "item_id", "value": "4"}
        )

    assert [(str(resource.uri), resource.name, resource.mime_type) for resource in resources.resources] == [
        (README_URI, "readme", README_MIME)
    ]
    assert [(template.uri_template, template.name) for template in templates.resource_templates] == [
        (ITEM_TEMPLATE, "item")
    ]
    assert readme.contents == [TextResourceContents(uri=README_URI, mime_type=README_MIME, text=README_TEXT)]
    assert item.contents == [TextResourceContents(uri=item_uri, mime_type=ITEM_MIME, text=item_text("42"))]
    # Template variables have no configured completions: the request is accepted and offers nothing.
    assert template_completion.completion.values == []


async def test_prompts_list_get_and_complete(daphne_url: str, feature_access: Access) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, feature_access) as client:
        prompts = await client.list_prompts()
        prompt = await client.get_prompt(PROMPT_NAME, {"topic": "sessions", "style": "detailed"})
        completed = await client.complete(
            PromptReference(type="ref/prompt", name=PROMPT_NAME), {"name": "style", "value": "B"}
        )
        nothing = await client.complete(
            PromptReference(type="ref/prompt", name=PROMPT_NAME), {"name": "topic", "value": ""}
        )

    [listed] = prompts.prompts
    assert listed.name == PROMPT_NAME
    assert [(argument.name, argument.required) for argument in listed.arguments or []] == [
        ("topic", True),
        ("style", False),
    ]
    assert prompt.description == PROMPT_DESCRIPTION
    assert [
        (message.role, message.content.type, message.content.text)
        for message in prompt.messages
        if isinstance(message.content, TextContent)
    ] == rendered_prompt("sessions", "detailed")
    assert len(prompt.messages) == len(rendered_prompt("sessions", "detailed"))
    # Matching is case-insensitive on the prefix.
    assert completed.completion.values == style_completions("B") == ["brief", "bullet points"]
    assert (completed.completion.total, completed.completion.has_more) == (2, False)
    assert nothing.completion.values == []
