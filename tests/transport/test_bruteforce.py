"""Brute force on the MCP endpoint (issue 19: "1,000 wrong tokens in 3.7 s, all plain 401, each a database lookup and
two log lines"; issue 25 #3: "one client's wrong tokens make other tenants' valid tokens from the same address
answer 429"): failed authentication is throttled by what fails, the source address and the token's prefix (429
after a burst), while valid tokens from that address or with that prefix are always served; a wrong token is
refused from a negative cache without a query, and the failure logs are sampled. The same attack through a real
daphne: ``tests/e2e/test_bruteforce_wire.py``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.testing import HttpCommunicator

from mcp_app.protocol.errors import RATE_LIMITED
from tests.helpers import Reply, call, header_list, rpc
from tests.request_path import caches_ready, counting

# Fresh addresses each run: on Redis a bucket outlives the test by its refill time.
ADDRESSES = {
    name: f"2001:db8::{uuid.uuid4().hex[:4]}:{i}"
    for i, name in enumerate(("203.0.113.7", "198.51.100.1", "203.0.113.8", "203.0.113.9", "192.0.2.1", "192.0.2.2"))
}
BODY = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}})


async def call_from(access: Any, address: str, token: str | None) -> Reply:
    """A call from ``address`` (the ASGI scope's client) with ``token`` (``None``: no ``Authorization``)."""
    import orjson

    from mcp_host.asgi import application

    headers = {
        **({"authorization": f"Bearer {token}"} if token is not None else {}),
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-11-25",
    }
    comm = HttpCommunicator(
        application, "POST", f"{access.path}?{access.query}", body=orjson.dumps(BODY), headers=header_list(headers)
    )
    comm.scope["client"] = (address, 40000)
    try:
        response = await comm.get_response(timeout=5)
    finally:
        await comm.wait(timeout=5)
    return Reply(
        status=response["status"],
        headers={key.decode().lower(): value.decode() for key, value in response["headers"]},
        body=response["body"],
    )


@pytest.fixture
def small_burst(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "AUTH_FAILURE_RATE": 0.2, "AUTH_FAILURE_BURST": 5}


def wrong_token(n: int) -> str:
    return f"mcp_{n:08x}_not-a-real-secret-{n}"


async def test_wrong_tokens_are_throttled_per_address_while_other_addresses_and_good_tokens_are_served(
    make_access: Callable[..., Awaitable[Any]], small_burst: None
) -> None:
    access = await make_access(tools=("echo",))
    statuses = [(await call_from(access, ADDRESSES["203.0.113.7"], wrong_token(n))).status for n in range(8)]
    assert statuses == [401] * 5 + [429] * 3
    refused = await call_from(access, ADDRESSES["203.0.113.7"], wrong_token(99))
    assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == RATE_LIMITED and error["data"]["scope"] == "address" and error["data"]["retryAfterMs"] > 0
    # The throttled address's requests without a token are refused too; its valid token is served (agents of
    # many tenants share egress addresses).
    assert (await call_from(access, ADDRESSES["203.0.113.7"], None)).status == 429
    assert (await call_from(access, ADDRESSES["203.0.113.7"], access.raw_token)).status == 200
    # Another address is not affected: its wrong token is a plain 401, its good token served.
    assert (await call_from(access, ADDRESSES["198.51.100.1"], wrong_token(1))).status == 401
    assert (await call_from(access, ADDRESSES["198.51.100.1"], access.raw_token)).status == 200


async def test_a_throttled_address_costs_no_lookup_and_no_hop_for_what_cannot_authenticate(
    make_access: Callable[..., Awaitable[Any]], small_burst: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    access = await make_access(tools=("echo",))
    for n in range(6):
        await call_from(access, ADDRESSES["203.0.113.8"], wrong_token(1000 + n))
    # A token this process already found unknown, a missing or a malformed one: refused from memory.
    for token in (wrong_token(1000), None, "not-a-token"):
        with counting(monkeypatch) as cost:
            assert (await call_from(access, ADDRESSES["203.0.113.8"], token)).status == 429
        assert (cost.queries, cost.hops) == ([], []), token
    # A token never seen may be valid: only a lookup tells, and a wrong one is still answered 429.
    fresh = await call_from(access, ADDRESSES["203.0.113.8"], wrong_token(2000))
    assert fresh.status == 429 and int(fresh.headers["retry-after"]) >= 1


async def test_wrong_secrets_under_one_prefix_are_throttled_across_addresses_while_the_real_token_is_served(
    make_access: Callable[..., Awaitable[Any]], small_burst: None
) -> None:
    access = await make_access(tools=("echo",))
    guesses = [f"mcp_{access.token.prefix}_guess-{n}" for n in range(7)]
    # Each guess from another address: no address is over its burst, the prefix is.
    statuses = [
        (await call_from(access, f"{ADDRESSES['192.0.2.1']}{n}", guess)).status for n, guess in enumerate(guesses)
    ]
    assert statuses == [401] * 5 + [429] * 2
    refused = await call_from(access, ADDRESSES["192.0.2.2"], f"mcp_{access.token.prefix}_guess-99")
    assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["data"]["scope"] == "token"
    # The token itself, from an address that guessed too: served.
    assert (await call_from(access, f"{ADDRESSES['192.0.2.1']}0", access.raw_token)).status == 200
    assert (await call_from(access, ADDRESSES["192.0.2.2"], access.raw_token)).status == 200


async def test_a_wrong_token_is_refused_from_the_negative_cache_without_a_database_lookup(
    make_access: Callable[..., Awaitable[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    access = await make_access(tools=("echo",))
    await caches_ready()  # the server's snapshot is cached once invalidations are followed (the 401 names it)
    unknown_prefix = wrong_token(0xABCDEF)
    known_prefix = f"mcp_{access.token.prefix}_wrong-secret"  # a real token's prefix, a wrong secret
    for token in (unknown_prefix, known_prefix):
        with counting(monkeypatch) as cost:
            assert (await call(access, BODY, headers={"authorization": f"Bearer {token}"})).status == 401
        assert cost.queries, "the first time, the token is looked up"
        with counting(monkeypatch) as cost:
            assert (await call(access, BODY, headers={"authorization": f"Bearer {token}"})).status == 401
        assert (cost.queries, cost.hops) == ([], []), token
    # Any other secret under the unknown prefix is refused from the cache too; the real token still works.
    with counting(monkeypatch) as cost:
        other = f"mcp_{0xABCDEF:08x}_another-secret"
        assert (await call(access, BODY, headers={"authorization": f"Bearer {other}"})).status == 401
    assert cost.queries == []
    assert (await call(access, BODY)).status == 200


async def test_failure_logs_are_sampled(
    make_access: Callable[..., Awaitable[Any]], caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "AUTH_FAILURE_BURST": 1000, "AUTH_FAILURE_LOG_INTERVAL_SECONDS": 3600}
    access = await make_access(tools=("echo",))
    caplog.set_level(logging.INFO)
    for n in range(30):
        assert (await call_from(access, ADDRESSES["203.0.113.9"], wrong_token(3000 + n))).status == 401
    failures = [r for r in caplog.records if r.name == "mcp_app.limits.auth"]
    access_lines = [r for r in caplog.records if r.name == "mcp_app.access" and getattr(r, "status", None) == 401]
    assert len(failures) <= 1
    assert len(access_lines) <= 5  # one a second at most
