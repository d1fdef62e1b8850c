"""Failed-authentication throttling through a real daphne on PostgreSQL and Redis (issue 25 #3): agents of many
tenants share egress addresses, so one client hammering wrong tokens from an address gets 429 with
``Retry-After`` while another tenant's valid token from the same address is never refused (at 7eabff9, 24% of
its calls answered 429 at 3 wrong tokens a second, 83% at 20).

Both clients connect from one random loopback address of this test (``127.x.y.z``), so no other test shares the
address's fleet-wide failure bucket in Redis.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Callable

import httpx
import pytest

from mcp_app.protocol.errors import RATE_LIMITED
from tests.conftest import Access
from tests.helpers import endpoint, post_headers, rpc

pytestmark = pytest.mark.e2e

ECHO = rpc("tools/call", {"name": "echo", "arguments": {"text": "tenant B"}})
VICTIM_CALLS = 40
MAX_ATTEMPTS = 400  # the attacker's bound to reach its throttle (the default burst is 20)


def shared_address() -> str:
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"


@pytest.fixture
def two_tenants(transactional_db: None, access_factory: Callable[..., Access]) -> tuple[Access, Access]:
    """Two tenants' servers with ``echo``, committed so that daphne sees them (a sync fixture: the ORM)."""
    return access_factory(tools=("echo",)), access_factory(tools=("echo",))


async def test_wrong_tokens_from_a_shared_address_never_throttle_another_tenants_valid_token(
    daphne_url: str, two_tenants: tuple[Access, Access]
) -> None:
    tenant_a, tenant_b = two_tenants
    assert tenant_a.tenant.pk != tenant_b.tenant.pk
    transport = httpx.AsyncHTTPTransport(local_address=shared_address())
    headers = {"MCP-Protocol-Version": "2025-11-25"}

    def wrong_token(n: int) -> str:  # tenant A's prefix with wrong secrets, and made-up tokens
        prefix = tenant_a.token.prefix if n % 2 else secrets.token_hex(4)
        return f"mcp_{prefix}_wrong-{n}"

    async with httpx.AsyncClient(transport=transport, timeout=10) as http:

        async def attack(n: int) -> httpx.Response:
            return await http.post(
                endpoint(daphne_url, tenant_a),
                json=ECHO,
                headers={**post_headers(tenant_a), **headers, "Authorization": f"Bearer {wrong_token(n)}"},
            )

        # The attacker spends its failures: 401s, then 429.
        attempts = 0
        while (await attack(attempts)).status_code != 429:
            attempts += 1
            assert attempts < MAX_ATTEMPTS, "the wrong tokens were never throttled"

        # Under the block, it keeps hammering while tenant B calls from the same address.
        done = asyncio.Event()
        refused: list[httpx.Response] = []

        async def keep_attacking() -> None:
            n = MAX_ATTEMPTS
            while not done.is_set():
                reply = await attack(n)
                n += 1
                assert reply.status_code in (401, 429), reply.text
                if reply.status_code == 429:
                    refused.append(reply)

        async def victim() -> list[httpx.Response]:
            try:
                return [
                    await http.post(
                        endpoint(daphne_url, tenant_b), json=ECHO, headers={**post_headers(tenant_b), **headers}
                    )
                    for _ in range(VICTIM_CALLS)
                ]
            finally:
                done.set()

        _, calls = await asyncio.gather(keep_attacking(), victim())

    assert [reply.status_code for reply in calls] == [200] * VICTIM_CALLS
    assert all(reply.json()["result"]["content"][0]["text"] == "tenant B" for reply in calls)
    assert refused, "the attacker was served while tenant B called"
    for reply in refused:
        assert int(reply.headers["retry-after"]) >= 1
        assert reply.json()["error"]["code"] == RATE_LIMITED
