"""Bounded memory against a real daphne process (issue 19, item 1): client values the server echoes are
bounded (a 4 MB ``progressToken`` is refused with -32602, a 4 KB id with -32600) in both eras."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from mcp_app.protocol.errors import INVALID_PARAMS, INVALID_REQUEST
from tests.conftest import Access
from tests.transport.test_modern import modern_body, routing_headers

from .test_two_processes import endpoint, headers

pytestmark = pytest.mark.e2e

WAIT = 30.0
FOUR_MB = 4_000_000  # under the 4 MiB body limit: the token itself is what is refused


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


def progress_call(token: str, request_id: int | str = 5) -> dict:
    params = {"name": "progress_demo", "arguments": {"steps": 3}, "_meta": {"progressToken": token}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_a_4_mb_progress_token_is_refused_with_invalid_params(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, live_access)
    refused = await http.post(url, json=progress_call("t" * FOUR_MB), headers=headers(live_access))
    assert refused.headers["content-type"] == "application/json"  # no stream was opened for it
    error = refused.json()
    assert error["id"] == 5 and error["error"]["code"] == INVALID_PARAMS
    assert error["error"]["data"] == {"maxBytes": 1024}
    assert len(refused.content) < 1024  # not echoed
    served = await http.post(url, json=progress_call("t" * 1024), headers=headers(live_access))
    assert "notifications/progress" in served.text


async def test_an_id_too_long_to_echo_is_refused_without_it(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    url = endpoint(daphne_url, live_access)
    refused = await http.post(url, json=progress_call("p", request_id="i" * 4096), headers=headers(live_access))
    error = refused.json()
    assert error["id"] is None and error["error"]["code"] == INVALID_REQUEST
    assert len(refused.content) < 1024


async def test_the_bound_holds_on_the_stateless_wire_too(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    body = modern_body(
        "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": "t" * 5000}}
    )
    refused = await http.post(
        endpoint(daphne_url, live_access), json=body, headers={**headers(live_access), **routing_headers(body)}
    )
    error = refused.json()
    assert error["error"]["code"] == INVALID_PARAMS and len(refused.content) < 2048
