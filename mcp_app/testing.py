"""A pytest plugin for projects that use mcp_app: test your own ``@tool``s in-process, without a network.

Enable it with ``pytest_plugins = ["mcp_app.testing"]`` in your top-level ``conftest.py`` (it needs pytest-django
and pytest-asyncio); docs/install.md, "Test your tools without a network", shows it in use. Fixtures, prefixed
``mcp_``: ``mcp_tools`` (the ``@tool`` names bound to ``mcp_server``: all unless overridden), ``mcp_tenant``,
``mcp_server``, ``mcp_agent``, ``mcp_token`` (an ``IssuedToken``), and the ``McpTestClient``\\ s ``mcp_client``
(handshake era) and ``mcp_modern_client`` (2026-07-28), which drive your real router and consumer in-process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from mcp_app.protocol.modern import NAME_FIELDS

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"


@dataclass(frozen=True)
class IssuedToken:
    token: Any
    raw: str


@dataclass
class McpReply:
    """One HTTP answer: status, headers (lower-case names), and the JSON-RPC message(s) it carried."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def messages(self) -> list[Any]:
        """Every JSON-RPC message: the JSON body, or each ``data:`` of an event stream (progress included)."""
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            return [
                orjson.loads(line[len("data: ") :])
                for line in self.body.decode().splitlines()
                if line.startswith("data: ") and line[len("data: ") :].strip()
            ]
        return [orjson.loads(self.body)] if self.body else []

    @property
    def response(self) -> Any:
        """The final message (the JSON-RPC response)."""
        return self.messages[-1] if self.messages else None


@dataclass
class McpTestClient:
    """Sends JSON-RPC requests to one server as one agent, in-process."""

    application: Any
    server_id: str
    agent_id: str
    raw_token: str
    era: str = "legacy"
    timeout: float = 10.0
    session_id: str | None = None
    _next_id: int = field(default=0, repr=False)

    async def post(self, message: Any, *, headers: dict[str, str] | None = None) -> McpReply:
        """POST ``message`` (a dict or a batch) as it is; only the era's headers are added."""
        from channels.testing import HttpCommunicator

        merged = {
            "authorization": f"Bearer {self.raw_token}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN_VERSION if self.era == "modern" else LEGACY_VERSION,
        }
        if self.session_id is not None:
            merged["mcp-session-id"] = self.session_id
        if self.era == "modern" and isinstance(message, dict) and "method" in message:
            merged["mcp-method"] = message["method"]
            routed = NAME_FIELDS.get(message["method"])  # Mcp-Name: tools/call, ..., tasks/get, tasks/cancel
            if routed and isinstance(message.get("params"), dict) and routed in message["params"]:
                merged["mcp-name"] = str(message["params"][routed])
        merged.update(headers or {})
        communicator = HttpCommunicator(
            self.application,
            "POST",
            f"/mcp/{self.server_id}?agentId={self.agent_id}",
            body=orjson.dumps(message),
            headers=[(key.encode(), value.encode()) for key, value in merged.items()],
        )
        try:
            answer = await communicator.get_response(timeout=self.timeout)
        finally:
            await communicator.wait(timeout=self.timeout)
        reply_headers = {key.decode().lower(): value.decode() for key, value in answer["headers"]}
        return McpReply(status=answer["status"], headers=reply_headers, body=answer["body"])

    async def request(self, method: str, params: dict[str, Any] | None = None) -> McpReply:
        """A request with a fresh id; the modern era's ``_meta`` envelope is added to ``params``."""
        self._next_id += 1
        params = dict(params or {})
        if self.era == "modern":
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                **params.get("_meta", {}),
            }
        return await self.post({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})

    async def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The ``result`` of a request; raises ``AssertionError`` naming the error when there is none."""
        reply = await self.request(method, params)
        response = reply.response
        if not isinstance(response, dict) or "result" not in response:
            raise AssertionError(f"{method} answered HTTP {reply.status}: {response!r}")
        return response["result"]

    async def initialize(self) -> dict[str, Any]:
        """Handshake era: open a session (its id is sent on later requests)."""
        if self.era == "modern":
            raise RuntimeError("the 2026-07-28 era has no initialize: requests are stateless")
        reply = await self.request(
            "initialize",
            {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "mcp_app.testing"}},
        )
        self.session_id = reply.headers.get("mcp-session-id")
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply.response["result"]

    async def list_tools(self) -> list[dict[str, Any]]:
        return (await self.result("tools/list"))["tools"]

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``CallToolResult`` (``isError`` results included; protocol errors raise ``AssertionError``)."""
        return await self.result("tools/call", {"name": name, "arguments": arguments or {}})


@pytest.fixture
def mcp_tools() -> list[str]:
    from mcp_app.definitions.registry import registry

    return registry.names()


@pytest.fixture
def mcp_tenant(transactional_db: None) -> Any:
    from mcp_app.models import Tenant

    return Tenant.objects.create(slug="test-tenant", name="Test tenant")


@pytest.fixture
def mcp_server(mcp_tenant: Any, mcp_tools: list[str]) -> Any:
    from mcp_app.models import McpServer, ServerTool, Tool

    server = McpServer.objects.create(tenant=mcp_tenant, server_id="test-server", name="test-server")
    mcp_tenant.allow_python_tools(mcp_tools)  # the operator's allow-list of @tools for this tenant
    for position, name in enumerate(mcp_tools):
        tool = Tool.objects.create(tenant=mcp_tenant, name=name, kind=Tool.Kind.PYTHON, python_name=name)
        ServerTool.objects.create(server=server, tool=tool, position=position)
    server.refresh_from_db()
    return server


@pytest.fixture
def mcp_agent(mcp_tenant: Any) -> Any:
    from mcp_app.models import Agent

    return Agent.objects.create(tenant=mcp_tenant, agent_id="test-agent", name="Test agent")


@pytest.fixture
def mcp_token(mcp_agent: Any, mcp_server: Any) -> IssuedToken:
    from mcp_app.models import AgentToken

    token, raw = AgentToken.objects.issue_token(mcp_agent, servers=[mcp_server], name="mcp_app.testing")
    return IssuedToken(token=token, raw=raw)


@pytest.fixture
def mcp_asgi_application() -> Any:
    """The project's ``ASGI_APPLICATION`` (what daphne would serve)."""
    from channels.routing import get_default_application

    return get_default_application()


@pytest.fixture
def mcp_client_factory(
    mcp_asgi_application: Any, mcp_server: Any, mcp_agent: Any, mcp_token: IssuedToken
) -> Callable[..., McpTestClient]:
    def make(era: str = "legacy", **fields: Any) -> McpTestClient:
        if era not in ("legacy", "modern"):
            raise ValueError("era must be 'legacy' or 'modern'")
        return McpTestClient(
            application=mcp_asgi_application,
            server_id=mcp_server.server_id,
            agent_id=mcp_agent.agent_id,
            raw_token=mcp_token.raw,
            era=era,
            **fields,
        )

    return make


@pytest.fixture
def mcp_client(mcp_client_factory: Callable[..., McpTestClient]) -> McpTestClient:
    return mcp_client_factory("legacy")


@pytest.fixture
def mcp_modern_client(mcp_client_factory: Callable[..., McpTestClient]) -> McpTestClient:
    return mcp_client_factory("modern")
