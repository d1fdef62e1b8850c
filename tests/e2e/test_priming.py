"""A handshake-era tool call that stays silent still sends bytes, against a real daphne process: its headers and
first bytes (the priming event on a 2025-11-25 session), then keep-alive comments, so a proxy's read timeout (60 s
in nginx) never cuts it.

- A call with a progress token opens its stream at once: the priming event (on a session) or a comment, before
  the tool says anything. This covers a worker call that no worker has taken yet (``countdown``).
- Any other tool call on a session opens it after ``SSE_OPEN_AFTER_SECONDS`` (1 s), and a fast call stays JSON.
- Keep-alives follow while the call is silent (every 0.2 s on the test daphne, ``KEEPALIVE_SECONDS``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import endpoint, initialize
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

WAIT = 10.0
AT_ONCE_SECONDS = 3.0  # "at once" on a loaded machine: far below a proxy's 60 s, and below the 1 s grace + slack


@pytest.fixture
def silent_access(transactional_db: None, access_factory: Any) -> Access:
    return access_factory(tools=("wait_for_release", "echo", "countdown"))


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


def tool_call(name: str, arguments: dict[str, Any], progress_token: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}


async def open_session(http: httpx.AsyncClient, url: str, access: Access) -> dict[str, str]:
    opened = await http.post(url, json=initialize({}), headers=headers(access))
    session = opened.headers["mcp-session-id"]
    return headers(access, **{"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})


async def first_bytes(
    http: httpx.AsyncClient, url: str, body: Any, request_headers: dict[str, str]
) -> tuple[httpx.Response, list[str], float]:
    """POST, and read (bounded) until three blank-line-ended SSE blocks arrived: the response, those blocks and
    the seconds until the first of them. The call itself never ends (the tool waits forever)."""
    started = time.monotonic()
    blocks: list[str] = []
    first = None
    async with http.stream("POST", url, json=body, headers=request_headers) as response:
        buffer = ""
        async with asyncio.timeout(WAIT):
            async for chunk in response.aiter_text():
                first = first or time.monotonic()
                buffer += chunk
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    blocks.append(block)
                if len(blocks) >= 3:
                    break
    return response, blocks, (first or time.monotonic()) - started


async def test_a_silent_call_with_a_progress_token_on_a_session_gets_the_priming_event_at_once(
    daphne_url: str, silent_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, silent_access)
    on_session = await open_session(http, url, silent_access)
    response, blocks, seconds = await first_bytes(http, url, tool_call("wait_for_release", {}, "p"), on_session)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert seconds < AT_ONCE_SECONDS
    assert blocks[0].startswith("id: ") and "retry: " in blocks[0] and blocks[0].endswith("data: ")  # priming
    assert blocks[1:] == [": keep-alive", ": keep-alive"]


async def test_a_silent_call_on_a_session_without_a_token_opens_after_the_grace(
    daphne_url: str, silent_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, silent_access)
    on_session = await open_session(http, url, silent_access)
    response, blocks, seconds = await first_bytes(http, url, tool_call("wait_for_release", {}), on_session)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert 0.9 <= seconds < 1.0 + AT_ONCE_SECONDS  # SSE_OPEN_AFTER_SECONDS, not the first notification (never)
    assert blocks[0].startswith("id: ") and blocks[0].endswith("data: ")
    assert blocks[1] == ": keep-alive"
    fast = await http.post(url, json=tool_call("echo", {"text": "x"}), headers=on_session)
    assert fast.headers["content-type"] == "application/json"  # a call that answers in time stays JSON


async def test_a_sessionless_call_with_a_progress_token_opens_at_once(
    daphne_url: str, silent_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, silent_access)
    response, blocks, seconds = await first_bytes(
        http, url, tool_call("wait_for_release", {}, "p"), headers(silent_access)
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    assert seconds < AT_ONCE_SECONDS
    assert blocks[0] == ": open" and blocks[1] == ": keep-alive"


async def test_a_worker_call_not_taken_yet_gets_the_priming_event_at_once(
    daphne_url: str, silent_access: Access, http: httpx.AsyncClient
) -> None:
    """``countdown`` runs on a Celery worker when ``REDIS_URL`` is set (none may be consuming the queue now),
    in the serving process otherwise: either way its first progress is a second away, and the stream is open
    before it."""
    url = endpoint(daphne_url, silent_access)
    on_session = await open_session(http, url, silent_access)
    body = tool_call("countdown", {"steps": 3, "interval_ms": 5000}, "c")
    response, blocks, seconds = await first_bytes(http, url, body, on_session)
    assert response.status_code == 200
    assert seconds < AT_ONCE_SECONDS
    assert blocks[0].startswith("id: ") and blocks[0].endswith("data: ")
