"""One allow-list for every outbound connection (``mcp_app.outbound``): which list each kind reads, the URL rule
that uses it, and the SDK-side httpx2 client that refuses a private address before connecting to it."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from django.test import override_settings

from mcp_app import outbound
from mcp_app.definitions.http_tools import validate_url
from mcp_app.definitions.upstreams import validate_upstream_url
from mcp_app.netguard import ForbiddenAddress, refusal

LOOPBACK = ipaddress.ip_address("127.0.0.1")


def admits_loopback(kind: outbound.OutboundKind) -> bool:
    return refusal(LOOPBACK, 8080, "127.0.0.1", outbound.allowed_networks(kind)) is None


@pytest.mark.parametrize("kind", outbound.KINDS)
def test_every_kind_refuses_loopback_by_default_and_admits_it_when_the_outbound_list_does(kind: Any) -> None:
    assert not admits_loopback(kind)
    with override_settings(MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        assert admits_loopback(kind)
    assert not admits_loopback(kind)  # the cached list follows the setting back


def test_the_older_settings_add_to_their_own_kind_only() -> None:
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        assert [admits_loopback(kind) for kind in outbound.KINDS] == [True, False, False, False]
    with override_settings(MCP_APP={"OAUTH_CIMD_ALLOWED_NETWORKS": ["127.0.0.0/8"]}):
        assert [admits_loopback(kind) for kind in outbound.KINDS] == [False, False, True, False]
    with override_settings(MCP_APP={"BUDGET_ALERT_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        assert [admits_loopback(kind) for kind in outbound.KINDS] == [False, False, False, True]
    with override_settings(
        MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["10.0.0.0/8"], "HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}
    ):
        allow = outbound.allowed_networks("http_tool")
        assert refusal(ipaddress.ip_address("10.1.2.3"), 80, "10.1.2.3", allow) is None
        assert refusal(LOOPBACK, 80, "127.0.0.1", allow) is None


def test_an_invalid_outbound_entry_is_a_configuration_error() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from mcp_app.conf import mcp_settings

    with (
        override_settings(MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["10.0.0.0/33"]}),
        pytest.raises(ImproperlyConfigured, match="OUTBOUND_ALLOWED_NETWORKS"),
    ):
        mcp_settings.OUTBOUND_ALLOWED_NETWORKS  # noqa: B018


def test_urls_are_checked_against_their_own_kinds_list() -> None:
    url = "http://127.0.0.1:8080/mcp"
    with pytest.raises(ValueError, match="upstreams may not call it"):
        validate_upstream_url(url)
    with pytest.raises(ValueError, match="http tools may not call it"):
        validate_url(url)
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        validate_url(url)
        with pytest.raises(ValueError, match="upstreams may not call it"):
            validate_upstream_url(url)
        with pytest.raises(ValueError, match="upstreams may not call it"):
            validate_url(url, kind="upstream")
    with override_settings(MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1:8080"]}):
        validate_upstream_url(url)
        validate_url(url, kind="upstream")
        validate_url(url)


# -- the upstream client, at the socket ---------------------------------------------------------------------------


class Listener:
    """A real HTTP/1.1 server on 127.0.0.1 that counts the connections it accepted and answers every request with
    ``status`` (a redirect to ``/elsewhere`` when 3xx)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.connections = 0
        self.paths: list[str] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while line := await reader.readline():
                self.paths.append(line.split()[1].decode())
                while (await reader.readline()) not in (b"\r\n", b""):
                    pass
                location = b"Location: /elsewhere\r\n" if 300 <= self.status < 400 else b""
                writer.write(b"HTTP/1.1 %d X\r\n%sContent-Length: 2\r\n\r\nok" % (self.status, location))
                await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    found = Listener()
    server = await asyncio.start_server(found._serve, "127.0.0.1", 0, family=socket.AF_INET)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


@pytest.fixture
def bare_socket() -> Any:
    """A listening socket nobody accepts on: a connection made to it waits in its backlog, where
    ``accept()`` finds it (no event loop involved, so nothing can be missed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def never_connected(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def client() -> httpx2.AsyncClient:
    return outbound.upstream_http_client(headers={"X-Test": "1"}, timeout=5.0, connect_timeout=2.0)


async def test_the_upstream_client_refuses_a_private_address_before_connecting(bare_socket: socket.socket) -> None:
    url = f"http://127.0.0.1:{bare_socket.getsockname()[1]}/mcp"
    async with client() as http:
        with pytest.raises(ForbiddenAddress, match="loopback"):
            await http.get(url)
    # Even allow-listed for webhooks, an upstream may not reach it.
    with override_settings(MCP_APP={"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        async with client() as http:
            with pytest.raises(ForbiddenAddress):
                await http.get(url)
    assert never_connected(bare_socket)
    # The same socket does see a connection that is made (the assertion above can fail).
    with override_settings(MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        async with client() as http:
            with pytest.raises(httpx2.TimeoutException):
                await http.get(url, timeout=httpx2.Timeout(0.2, connect=2.0))
    assert not never_connected(bare_socket)


async def test_the_upstream_client_checks_every_address_a_name_resolves_to(
    bare_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "127.0.0.1"]

    monkeypatch.setattr(outbound, "resolver", resolver)
    async with client() as http:
        with pytest.raises(ForbiddenAddress, match=r"127\.0\.0\.1"):
            await http.get(f"http://mcp.example.test:{bare_socket.getsockname()[1]}/mcp")
    assert never_connected(bare_socket)


async def test_an_allow_listed_upstream_is_reached_pinned_with_keep_alive_and_no_redirect(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(outbound, "resolver", resolver)
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9/")  # would fail every request if it were used
    with override_settings(MCP_APP={"OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}):
        async with client() as http:
            first = await http.get(f"http://mcp.example.test:{listener.port}/mcp")
            second = await http.get(f"http://mcp.example.test:{listener.port}/mcp")
            listener.status = 307
            redirected = await http.post(f"http://mcp.example.test:{listener.port}/mcp", content=b"{}")
    assert (first.status_code, second.status_code, redirected.status_code) == (200, 200, 307)
    assert listener.paths == ["/mcp", "/mcp", "/mcp"]  # the redirect was handed back, not followed
    assert listener.connections == 1  # one kept-alive connection served all three
    assert lookups == ["mcp.example.test"]
    assert first.request.headers["X-Test"] == "1"
