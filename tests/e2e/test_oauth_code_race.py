"""One authorization code exchanged at the same moment on two daphne processes (PostgreSQL, Redis): exactly one
exchange gets tokens, every other answers 400 ``invalid_grant`` (never 500), and the reuse revokes what the one
issued (OAuth 2.1 §4.1.3; docs/oauth.md).

Each daphne runs Django's synchronous views one at a time, so the race is between processes, as behind a load
balancer: the code is posted to both at once, several rounds (one fresh code each), each round's requests
released together. Before, both processes could pass the code check before either deleted the grant: two 200s
with two token families, or a 500 (issue 24 #7).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from channels.db import database_sync_to_async
from django.test import Client

from tests.e2e.conftest import Daphne
from tests.helpers import close_connections_of_async_threads  # noqa: F401  (clean-up)
from tests.oauth_flow import REDIRECT, authorize_params, pkce, redirect_query, register

pytestmark = pytest.mark.e2e

HOST = "localhost"  # the origin both processes answer as (the resource names it)
ROUNDS = 4
PER_PROCESS = 3
WAIT = 30.0


def _code(client: Client, user: Any, server: Any, registered: dict[str, Any]) -> tuple[str, str]:
    """A fresh authorization code for ``server`` at ``HOST``'s origin, and its PKCE verifier."""
    verifier, challenge = pkce()
    resource = f"http://{HOST}/mcp/{server.server_id}"
    page = client.get(
        "/oauth/authorize/",
        authorize_params(registered["client_id"], server.server_id, challenge, resource=resource, prompt="consent"),
    )
    assert page.status_code == 200, page.content[:500]
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    return redirect_query(client.post("/oauth/authorize/", {**form, "allow": "Authorize", "grant": "all"}))[
        "code"
    ], verifier


async def _token(http: httpx.AsyncClient, daphne: Daphne, **data: str) -> httpx.Response:
    return await http.post(
        f"{daphne.url}/oauth/token/",
        content=urlencode(data),
        headers={"Host": HOST, "Content-Type": "application/x-www-form-urlencoded"},
    )


async def test_one_code_exchanged_at_once_on_two_processes_issues_once_and_the_reuse_revokes(
    daphne: Daphne, second_daphne: Daphne, oauth_world: Any
) -> None:
    access, user = oauth_world
    client = Client(HTTP_HOST=HOST)
    registered = await database_sync_to_async(register)(client)
    await database_sync_to_async(client.force_login)(user)
    resource = f"http://{HOST}/mcp/{access.server.server_id}"
    logged = {process.url: len(process.stderr()) for process in (daphne, second_daphne)}  # shared processes
    async with httpx.AsyncClient(timeout=WAIT) as http:
        for round_ in range(ROUNDS):
            code, verifier = await database_sync_to_async(_code)(client, user, access.server, registered)
            exchange = {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "client_id": registered["client_id"],
                "code_verifier": verifier,
                "resource": resource,
            }
            replies = await asyncio.gather(
                *(_token(http, process, **exchange) for _ in range(PER_PROCESS) for process in (daphne, second_daphne))
            )
            statuses = sorted(reply.status_code for reply in replies)
            assert statuses == [200] + [400] * (len(replies) - 1), (round_, [r.text[:200] for r in replies])
            assert all(r.json()["error"] == "invalid_grant" for r in replies if r.status_code == 400), round_
            issued = next(r.json() for r in replies if r.status_code == 200)

            # The reuse revoked the one family: its access token is refused at the MCP endpoint, its refresh too.
            listing = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            served = await http.post(
                f"{daphne.url}/mcp/{access.server.server_id}",
                json=listing,
                headers={
                    "Host": HOST,
                    "Authorization": f"Bearer {issued['access_token']}",
                    "Accept": "application/json, text/event-stream",
                },
            )
            assert served.status_code == 401, (round_, served.status_code, served.text[:200])
            assert 'error="invalid_token"' in served.headers["www-authenticate"]
            refreshed = await _token(
                http,
                second_daphne,
                grant_type="refresh_token",
                refresh_token=issued["refresh_token"],
                client_id=registered["client_id"],
                resource=resource,
            )
            assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant", refreshed.text
    for process in (daphne, second_daphne):
        log = process.stderr()[logged[process.url] :]
        assert "Traceback" not in log, log[-3000:]
