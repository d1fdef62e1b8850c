"""The file-descriptor guard at the wire, with a real daphne started under a low ``ulimit -n`` (issue 19: under the
common 1,024-descriptor limit one agent holding ~1,000 GET streams made 93 of 93 requests of another tenant fail).

daphne runs with a soft ``RLIMIT_NOFILE`` of 256 (set in the daphne process only, before it execs). One agent
opens GET streams until the process answers 503 (``-32012``, scope ``process``): it must, well before the
descriptors run out, and every call of another tenant must still be served.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from mcp_app.protocol.errors import CAPACITY_EXCEEDED
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


def test_the_guard_reads_the_soft_limit(settings: Any) -> None:
    from mcp_app.limits import caps

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    settings.MCP_APP = {**settings.MCP_APP, "FD_RESERVE": 0}
    assert not caps.descriptors_short()
    settings.MCP_APP = {**settings.MCP_APP, "FD_RESERVE": soft}
    assert caps.descriptors_short()
