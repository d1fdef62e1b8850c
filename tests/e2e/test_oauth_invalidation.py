"""OAuth tokens on two daphne processes: revoking the access token (RFC 7009 endpoint), withdrawing the consent,
deleting the client, deactivating the user or the token's expiry reach both processes within a second (the same
invalidation log as agent tokens, ``tests/e2e/test_invalidation_across_processes.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async
from django.test import Client

from tests.oauth_flow import Issued, run_flow

from .conftest import BOUND_SECONDS, CALL

pytestmark = pytest.mark.e2e


@pytest.fixture
def live_oauth(oauth_world: Any) -> Issued:
    access, user = oauth_world
    return run_flow(Client(), user, access.server)


def revoke_at_endpoint(issued: Issued) -> None:
    response = Client().post("/oauth/revoke/", {"token": issued.access_token, "client_id": issued.client_id})
    assert response.status_code == 200


def withdraw(issued: Issued) -> None:
    from mcp_app.models import OAuthConsent

    OAuthConsent.objects.get(user=issued.user, application__client_id=issued.client_id).withdraw()


def delete_client(issued: Issued) -> None:
    from oauth2_provider.models import Application

    Application.objects.get(client_id=issued.client_id).delete()


def deactivate_user(issued: Issued) -> None:
    issued.user.is_active = False
    issued.user.save()


def expire(issued: Issued) -> None:
    from django.utils import timezone

    from mcp_app.models import AgentToken

    token = AgentToken.objects.get(oauth_consent__user=issued.user)
    token.expires_at = timezone.now() - timedelta(seconds=1)
    token.save()


CHANGES: dict[str, Callable[[Issued], None]] = {
    "access token revoked at the revocation endpoint": revoke_at_endpoint,
    "consent withdrawn": withdraw,
    "client deleted": delete_client,
    "user deactivated": deactivate_user,
    "token expired": expire,
}


@pytest.mark.usefixtures("shared_log")
@pytest.mark.parametrize("change", list(CHANGES))
async def test_an_oauth_revocation_reaches_every_process_within_a_second(
    change: str, daphne_url: str, second_daphne: Any, live_oauth: Issued
) -> None:
    bases = (daphne_url, second_daphne.url)
    headers = {
        "Authorization": f"Bearer {live_oauth.access_token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    async with httpx.AsyncClient(timeout=5.0) as http:
        for base in bases:  # each process caches the token (no agentId: the OAuth token names its agent)
            for _ in range(2):
                served = await http.post(f"{base}{live_oauth.path}", json=CALL, headers=headers)
                assert served.status_code == 200, served.text
        await database_sync_to_async(CHANGES[change])(live_oauth)
        committed = time.monotonic()
        seen: dict[str, float] = {}
        pending = set(bases)
        while pending:
            for base in sorted(pending):
                reply = await http.post(f"{base}{live_oauth.path}", json=CALL, headers=headers)
                if reply.status_code == 401:
                    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
                    seen[base] = time.monotonic() - committed
                    pending.discard(base)
            elapsed = time.monotonic() - committed
            if pending and elapsed > BOUND_SECONDS:
                pytest.fail(f"{change}: not seen by {sorted(pending)} after {elapsed:.2f}s (seen: {seen})")
            await asyncio.sleep(0.01)
    assert max(seen.values()) <= BOUND_SECONDS, seen
