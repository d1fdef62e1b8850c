"""PostgreSQL refused or partitioned under a running daphne: bounded 503s with ``Retry-After``, and service back.

A daphne process reaches the test database through a TCP proxy the test controls (``tests/tcp_proxy.py``), with
short database bounds (``MCP_DATABASE_CONNECT_TIMEOUT``, ``MCP_DATABASE_STATEMENT_TIMEOUT``,
``MCP_DATABASE_POOL_TIMEOUT``: 2 s each). Once it has served (its pool holds open connections), the proxy
either refuses (the server is down) or stalls (a partition: connections accepted and never answered, open ones
carry nothing). Then requests that need the database get 503 with ``Retry-After`` within ``BOUND_SECONDS``:

- on the MCP endpoint, an ``initialize`` and a call with a token not yet cached, with a JSON-RPC error body
  (``-32603``, the request's id, a message naming the database);
- on the API, a request with an API key (``{"error": {"code": "service_unavailable"}}``);
- ``/readyz`` answers 503 naming the database down, and Redis (cache, channel layer, Redis) still ``ok``;
- Django's views (``DatabaseUnavailableMiddleware``): the admin's sign-in page and the authorization endpoint for
  a browser with a session cookie (a short HTML page), the OAuth token and registration endpoints
  (``{"error": "temporarily_unavailable"}``, readable from any origin), one log line each; the
  authorization-server metadata, which needs no database, is still served;

and daphne's log holds no traceback. When the proxy forwards again, the same requests succeed. Before, they got
500 "Internal error" with tracebacks, or hung past 40 s, and ``/readyz`` reported Redis down too; the admin and
the OAuth endpoints answered 500 with a traceback (issue 25 #4).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import REQUIRE_SERVICES, Access
from tests.e2e.conftest import Daphne, database_url, running_daphne
from tests.helpers import endpoint, initialize, modern_body, post_headers, routing_headers
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.e2e

BOUND_SECONDS = 8.0  # the settings' 2 s bounds, twice over (connect after a failed check), plus a loaded machine
DATABASE_BOUNDS = {
    "MCP_DATABASE_CONNECT_TIMEOUT": "2",
    "MCP_DATABASE_STATEMENT_TIMEOUT": "2",
    "MCP_DATABASE_POOL_TIMEOUT": "2",
}
WAIT = 30.0


@dataclass
class Outage:
    daphne: Daphne
    proxy: TcpProxy
    access: Access
    fresh_token: str  # never used before the outage: its lookup needs the database
    api_key: str


def require_postgresql() -> dict[str, Any]:
    from django.db import connection

    if connection.vendor != "postgresql":
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but the test database is not PostgreSQL")
        pytest.skip("the database outage tests need PostgreSQL (DATABASE_URL)")
    return dict(connection.settings_dict)


@pytest.fixture
def outage(
    transactional_db: None,
    access_factory: Callable[..., Access],
    token_factory: Callable[..., Any],
    member_factory: Callable[..., Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Outage]:
    from mcp_app.models import ApiKey

    settings_dict = require_postgresql()
    access = access_factory()
    _token, fresh = token_factory(agent=access.agent, servers=[access.server])
    operator = member_factory(username="operator", password="x-unused-1", is_superuser=True)
    _key, raw_key = ApiKey.objects.issue_key(operator, name="outage")
    with TcpProxy(settings_dict.get("HOST") or "127.0.0.1", int(settings_dict.get("PORT") or 5432)) as proxy:
        proxied = {**settings_dict, "HOST": "127.0.0.1", "PORT": proxy.port}
        env = {"DATABASE_URL": database_url(proxied), **DATABASE_BOUNDS}
        with running_daphne(tmp_path_factory, extra_env=env) as server:
            yield Outage(server, proxy, access, fresh, raw_key)
            proxy.forward()


async def _timed(request: Any) -> tuple[httpx.Response | str, float]:
    started = time.monotonic()
    try:
        response: httpx.Response | str = await request
    except httpx.HTTPError as exc:  # a hang past the client's bound
        response = type(exc).__name__
    return response, time.monotonic() - started


def _requests(http: httpx.AsyncClient, outage: Outage) -> dict[str, Any]:
    url = endpoint(outage.daphne.url, outage.access)
    fresh = {**post_headers(outage.access), "Authorization": f"Bearer {outage.fresh_token}"}
    listing = modern_body("tools/list", id="list-1")
    return {
        "initialize": http.post(url, json={**initialize({}), "id": "init-1"}, headers=post_headers(outage.access)),
        "fresh token": http.post(url, json={**initialize({}), "id": 9}, headers=fresh),
        # The token is cached since the warm-up; the server's catalog was never read: its first read needs the
        # database (the handler's own failure, not the edge's).
        "tools/list": http.post(url, json=listing, headers={**post_headers(outage.access), **routing_headers(listing)}),
        "api": http.get(
            f"{outage.daphne.url}/api/v1/servers/",
            headers={"Authorization": f"Bearer {outage.api_key}", "Accept": "application/json"},
        ),
        "readyz": http.get(f"{outage.daphne.url}/readyz"),
        # Django's own views: a browser's page, and the authorization server's machine endpoints.
        # A browser that was here before sends its session cookie: reading the session needs the database.
        "admin login": http.get(
            f"{outage.daphne.url}/admin/login/",
            headers={"Accept": "text/html", "Cookie": f"sessionid={'s' * 32}"},
        ),
        "oauth token": http.post(
            f"{outage.daphne.url}/oauth/token/",
            data={"grant_type": "authorization_code", "code": "c0de", "client_id": "some-client"},
        ),
        "oauth register": http.post(
            f"{outage.daphne.url}/oauth/register/",
            json={"client_name": "Outage", "redirect_uris": ["http://127.0.0.1:33333/callback"]},
        ),
        "oauth authorize": http.get(
            f"{outage.daphne.url}/oauth/authorize/?response_type=code&client_id=some-client",
            headers={"Accept": "text/html", "Cookie": f"sessionid={'s' * 32}"},
        ),
        "oauth metadata": http.get(f"{outage.daphne.url}/.well-known/oauth-authorization-server"),
    }


@pytest.mark.parametrize("failure", ["refused", "partitioned"])
async def test_the_database_down_answers_503_with_retry_after_in_bounded_time_and_service_resumes(
    outage: Outage, failure: str
) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        # Served first: the pool holds connections the outage then breaks (or strands, when partitioned).
        warm = await asyncio.gather(*(_requests(http, outage)[name] for name in ("initialize", "api", "readyz")))
        assert [reply.status_code for reply in warm] == [200, 200, 200], [reply.text[:200] for reply in warm]

        await asyncio.to_thread(outage.proxy.refuse if failure == "refused" else outage.proxy.stall)
        requests = _requests(http, outage)
        down = dict(zip(requests, await asyncio.gather(*(_timed(r) for r in requests.values())), strict=True))

        await asyncio.to_thread(outage.proxy.forward)
        deadline = time.monotonic() + WAIT
        while True:  # back: the pool reconnects on its own (bounded wait, no sleep-timing)
            after = await asyncio.gather(*(_requests(http, outage)[name] for name in ("initialize", "api", "readyz")))
            if all(reply.status_code == 200 for reply in after) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)

    served = "oauth metadata"  # a document that needs no database: still served
    for what, (response, seconds) in down.items():
        assert isinstance(response, httpx.Response), (what, response, seconds)
        expected = 200 if what == served else 503
        assert response.status_code == expected, (what, response.status_code, response.text[:300])
        assert seconds < BOUND_SECONDS, (what, seconds)
    for what, request_id in (("initialize", "init-1"), ("fresh token", 9), ("tools/list", "list-1")):
        response = down[what][0]
        assert int(response.headers["retry-after"]) >= 1, what
        error = response.json()
        assert error["jsonrpc"] == "2.0" and error["id"] == request_id, (what, error)
        assert error["error"]["code"] == -32603 and "database" in error["error"]["message"], (what, error)
    api = down["api"][0]
    assert int(api.headers["retry-after"]) >= 1
    assert api.json()["error"]["code"] == "service_unavailable", api.text
    for what in ("admin login", "oauth authorize"):  # a browser's pages
        page = down[what][0]
        assert int(page.headers["retry-after"]) >= 1, what
        assert page.headers["content-type"].startswith("text/html"), (what, page.headers)
    for what in ("oauth token", "oauth register"):  # RFC 6749 §5.2 / RFC 7591 §3.2.2 error bodies
        response = down[what][0]
        assert int(response.headers["retry-after"]) >= 1, what
        assert response.json()["error"] == "temporarily_unavailable", (what, response.text)
        assert response.headers["access-control-allow-origin"] == "*", what  # a browser page's client reads it
        assert "Retry-After" in response.headers["access-control-expose-headers"], what
    assert down[served][0].json()["token_endpoint"].endswith("/oauth/token/")
    checks = down["readyz"][0].json()["checks"]
    assert checks["database"]["status"] == "down", checks
    for redis_backed in ("cache", "channel_layer", "redis"):
        assert checks[redis_backed]["status"] == "ok", (redis_backed, checks)
    assert [reply.status_code for reply in after] == [200, 200, 200], [reply.text[:200] for reply in after]
    assert "Traceback" not in outage.daphne.stderr(), outage.daphne.stderr()[-3000:]
    assert "POST /oauth/token/: 503, the database is unavailable" in outage.daphne.stderr()  # one line instead
