"""The file-descriptor guard at the wire, with a real daphne started under a low ``ulimit -n`` (issue 19: under the
common 1,024-descriptor limit one agent holding ~1,000 GET streams made 93 of 93 requests of another tenant fail).

daphne runs with a soft ``RLIMIT_NOFILE`` of 256 (set in the daphne process only, before it execs). One agent
opens GET streams until the process answers 503 (``-32012``, scope ``process``): it must, well before the
descriptors run out, and every call of another tenant must still be served.

Refused and limited answers (401, 503) must then close their connection, and idle keep-alive connections close
too (issue 25 #5): 1,100 stream attempts of one agent kept their refused connections open under ``ulimit -n
1024``, and another tenant failed 92 of 92 requests. Checked on raw sockets: the answer's ``Connection`` header
and the end of the connection as the client sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from mcp_app.protocol.errors import CAPACITY_EXCEEDED
from mcp_app.transport.edge_limits import PRESSURE_IDLE_SECONDS
from tests.conftest import Access

from .conftest import Daphne, running_daphne

DAPHNE_NOFILE = 256


@pytest.fixture
def low_nofile_daphne(
    transactional_db: None, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Daphne]:
    from . import conftest

    monkeypatch.setattr(conftest, "READY_TIMEOUT_SECONDS", 60.0)  # a daphne of its own, started on a busy machine
    # The limit is set in daphne's process only: this one may already hold more descriptors than that.
    with running_daphne(tmp_path_factory, nofile=DAPHNE_NOFILE) as server:
        yield server


def headers(access: Access, **extra: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {access.raw_token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        **extra,
    }


def url(server: Daphne, access: Access) -> str:
    return f"{server.url}{access.path}?{access.query}"


CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}


async def test_streams_are_refused_with_503_before_descriptors_run_out_and_another_tenant_is_served(
    low_nofile_daphne: Daphne, access_factory: Callable[..., Access]
) -> None:
    from channels.db import database_sync_to_async

    hog = await database_sync_to_async(access_factory)(tools=("echo",))
    other = await database_sync_to_async(access_factory)(tools=("echo",))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    streams: list[httpx.Response] = []
    refusal: httpx.Response | None = None
    async with httpx.AsyncClient(timeout=10.0, limits=limits) as hog_client, httpx.AsyncClient(timeout=10.0) as client:
        try:
            for _ in range(DAPHNE_NOFILE):
                request = hog_client.build_request("GET", url(low_nofile_daphne, hog), headers=headers(hog))
                response = await hog_client.send(request, stream=True)
                if response.status_code != 200:
                    await response.aread()
                    refusal = response
                    break
                streams.append(response)
            assert refusal is not None, f"{len(streams)} streams accepted under a limit of {DAPHNE_NOFILE}"
            assert refusal.status_code == 503, refusal.text
            assert refusal.headers["retry-after"] == "1"
            error = refusal.json()["error"]
            assert error["code"] == CAPACITY_EXCEEDED and error["data"]["scope"] == "process"
            assert len(streams) >= 50, len(streams)  # the guard keeps a reserve; it does not refuse everything
            replies = await asyncio.gather(
                *(client.post(url(low_nofile_daphne, other), json=CALL, headers=headers(other)) for _ in range(20))
            )
            assert [reply.status_code for reply in replies] == [200] * 20, [r.text[:200] for r in replies]
        finally:
            for stream in streams:
                with contextlib.suppress(Exception):
                    await stream.aclose()
    assert "Too many open files" not in low_nofile_daphne.stderr()


EOF_SECONDS = 10.0  # the bound on the server closing a connection it said it would close
IDLE_BEFORE = 60  # keep-alive connections answered before the pressure, left idle by their client
ATTEMPTS_UNDER_PRESSURE = 200  # more than the descriptors left: they fit only if every one is given back


class RawExchange:
    """One request on a connection of its own, its answer's status and headers; the connection stays open."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.status = 0
        self.headers: dict[str, str] = {}

    @classmethod
    async def send(cls, server: Daphne, access: Access, method: str, token: str | None = None) -> RawExchange:
        port = urlsplit(server.url).port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        exchange = cls(reader, writer)
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}' if method == "POST" else b""
        head = (
            f"{method} {access.path}?{access.query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token or access.raw_token}\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Type: application/json\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), EOF_SECONDS)
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        exchange.status = int(status_line.split()[1])
        exchange.headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
        return exchange

    async def closed_by_server(self) -> bool:
        """Whether the server ends the connection (EOF after the answer) within ``EOF_SECONDS``."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), EOF_SECONDS):
                pass
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return True

    def close(self) -> None:
        self.writer.close()


async def test_under_descriptor_pressure_refusals_and_idle_connections_give_their_descriptors_back(
    low_nofile_daphne: Daphne, access_factory: Callable[..., Access]
) -> None:
    from channels.db import database_sync_to_async

    hog = await database_sync_to_async(access_factory)(tools=("echo",))
    other = await database_sync_to_async(access_factory)(tools=("echo",))
    held: list[RawExchange] = []
    silent: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        # Before any pressure: answered calls whose client keeps the connection (a keep-alive, idle).
        idle = [await RawExchange.send(low_nofile_daphne, hog, "POST") for _ in range(IDLE_BEFORE)]
        held += idle
        assert {exchange.status for exchange in idle} == {200}
        # Part of the scenario, not a wait for a result: they are idle keep-alives for longer than the pressure
        # tolerates (a connection reused at once is never cut).
        await asyncio.sleep(PRESSURE_IDLE_SECONDS + 0.5)
        # Streams until the guard refuses one: that refusal closes its connection.
        for _ in range(DAPHNE_NOFILE):
            exchange = await RawExchange.send(low_nofile_daphne, hog, "GET")
            held.append(exchange)
            if exchange.status != 200:
                break
        assert exchange.status == 503, exchange.status
        assert exchange.headers.get("connection") == "close", exchange.headers
        assert await exchange.closed_by_server()
        # The idle keep-alive connections were given back as soon as the pressure began (all at once: the first
        # count that found descriptors short closed them).
        closed = await asyncio.gather(*(exchange.closed_by_server() for exchange in idle))
        assert all(closed), f"{closed.count(False)} of {len(idle)} idle connections still open"
        # Back into the pressure, deeper: connections that send nothing yet hold descriptors (they are not idle
        # keep-alives: nothing closes them but the idle timeout), as many as the idle ones gave back and more, so
        # the process stays short from here on.
        port = urlsplit(low_nofile_daphne.url).port
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(IDLE_BEFORE + 40)]
        # Many more attempts than descriptors are left: each refusal is given back. A few fail authentication
        # (401; more would be throttled to 429 for the whole address, the other tenant's too).
        for attempt in range(ATTEMPTS_UNDER_PRESSURE):
            token = "mcp_wrong" if attempt % 20 == 0 else None
            exchange = await RawExchange.send(low_nofile_daphne, hog, "POST" if token else "GET", token=token)
            held.append(exchange)
            assert exchange.status == (401 if token else 503), exchange.status
            assert exchange.headers.get("connection") == "close", (attempt, exchange.headers)
        async with httpx.AsyncClient(timeout=10.0) as client:
            replies = await asyncio.gather(
                *(client.post(url(low_nofile_daphne, other), json=CALL, headers=headers(other)) for _ in range(20))
            )
        assert [reply.status_code for reply in replies] == [200] * 20, [r.text[:200] for r in replies]
    finally:
        for exchange in held:
            exchange.close()
        for _reader, writer in silent:
            writer.close()
    assert "Too many open files" not in low_nofile_daphne.stderr()


def test_the_guard_reads_the_soft_limit(settings: Any) -> None:
    from mcp_app.limits import caps

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    settings.MCP_APP = {**settings.MCP_APP, "FD_RESERVE": 0}
    assert not caps.descriptors_short()
    settings.MCP_APP = {**settings.MCP_APP, "FD_RESERVE": soft}
    assert caps.descriptors_short()
