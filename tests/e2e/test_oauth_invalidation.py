"""OAuth tokens on two daphne processes: revoking the access token (RFC 7009 endpoint), withdrawing the consent,
deleting the client, deactivating the user or the token's expiry reach both processes within a second (the same
invalidation log as agent tokens, ``tests/e2e/test_invalidation_across_processes.py``). So does the person losing
eligibility (removed from the tenant, role below ``OAUTH_CONSENT_ROLE``, the server's open consent switched off,
deactivated), and their refresh token is refused from then on."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async
from django.test import Client

from tests.oauth_flow import ORIGIN, Issued, run_flow, token_request

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


HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def refused_everywhere_within_the_bound(
    issued: Issued, bases: tuple[str, ...], change: Callable[[], None]
) -> None:
    """Each process serves (and caches) the token; ``change`` runs; every process answers 401 invalid_token
    within ``BOUND_SECONDS``."""
    headers = {**HEADERS, "Authorization": f"Bearer {issued.access_token}", "MCP-Protocol-Version": "2025-11-25"}
    async with httpx.AsyncClient(timeout=5.0) as http:
        for base in bases:  # each process caches the token (no agentId: the OAuth token names its agent)
            for _ in range(2):
                served = await http.post(f"{base}{issued.path}", json=CALL, headers=headers)
                assert served.status_code == 200, served.text
        await database_sync_to_async(change)()
        committed = time.monotonic()
        seen: dict[str, float] = {}
        pending = set(bases)
        while pending:
            for base in sorted(pending):
                reply = await http.post(f"{base}{issued.path}", json=CALL, headers=headers)
                if reply.status_code == 401:
                    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
                    assert "resource_metadata=" in reply.headers["www-authenticate"]
                    seen[base] = time.monotonic() - committed
                    pending.discard(base)
            elapsed = time.monotonic() - committed
            if pending and elapsed > BOUND_SECONDS:
                pytest.fail(f"not seen by {sorted(pending)} after {elapsed:.2f}s (seen: {seen})")
            await asyncio.sleep(0.01)
    assert max(seen.values()) <= BOUND_SECONDS, seen


@pytest.mark.usefixtures("shared_log")
@pytest.mark.parametrize("change", list(CHANGES))
async def test_an_oauth_revocation_reaches_every_process_within_a_second(
    change: str, daphne_url: str, second_daphne: Any, live_oauth: Issued
) -> None:
    await refused_everywhere_within_the_bound(
        live_oauth, (daphne_url, second_daphne.url), lambda: CHANGES[change](live_oauth)
    )


def _membership(issued: Issued) -> Any:
    from mcp_app.models import TenantMembership

    return TenantMembership.objects.get(user=issued.user, tenant=issued.server.tenant)


def remove_member(issued: Issued) -> None:
    _membership(issued).delete()


def downgrade_member(issued: Issued) -> None:
    membership = _membership(issued)
    membership.role = "viewer"
    membership.save()


def close_open_consent(issued: Issued) -> None:
    issued.server.oauth_open_consent = False
    issued.server.save()


def open_consent_to_outsiders(server: Any, user: Any) -> None:
    """The person is no member; the server lets everyone signed in consent."""
    from mcp_app.models import TenantMembership

    TenantMembership.objects.filter(user=user).delete()
    server.oauth_open_consent = True
    server.save()


def make_admin(server: Any, user: Any) -> None:
    from mcp_app.models import TenantMembership

    TenantMembership.objects.filter(user=user, tenant=server.tenant).update(role="admin")


def nothing(server: Any, user: Any) -> None:
    """The person is a viewer of the server's tenant: eligible with the default ``OAUTH_CONSENT_ROLE``."""


# What ends a person's eligibility, how the person became eligible first and the least role that may consent.
ELIGIBILITY: dict[str, tuple[Callable[[Any, Any], None], Callable[[Issued], None], str]] = {
    "member removed from the tenant": (nothing, remove_member, "viewer"),
    "role downgraded below OAUTH_CONSENT_ROLE": (make_admin, downgrade_member, "admin"),
    "server's open consent switched off": (open_consent_to_outsiders, close_open_consent, "viewer"),
    "user deactivated": (nothing, deactivate_user, "viewer"),
}


@pytest.mark.usefixtures("shared_log")
@pytest.mark.parametrize("change", list(ELIGIBILITY))
async def test_losing_eligibility_ends_access_on_every_process_within_a_second(
    change: str, daphne_url: str, second_daphne: Any, oauth_world: Any, settings: Any
) -> None:
    access, user = oauth_world
    prepare, end, consent_role = ELIGIBILITY[change]
    if consent_role != "viewer":
        settings.MCP_APP = {**settings.MCP_APP, "OAUTH_CONSENT_ROLE": consent_role}

    def consent() -> Issued:
        prepare(access.server, user)
        return run_flow(Client(), user, access.server)

    issued = await database_sync_to_async(consent)()
    await refused_everywhere_within_the_bound(issued, (daphne_url, second_daphne.url), lambda: end(issued))

    def refresh() -> Any:
        return token_request(
            Client(),
            grant_type="refresh_token",
            refresh_token=issued.refresh_token,
            client_id=issued.client_id,
            resource=f"{ORIGIN}/mcp/{issued.server.server_id}",
        )

    refused = await database_sync_to_async(refresh)()
    assert refused.status_code == 400, refused.content
    assert json.loads(refused.content)["error"] == "invalid_grant"
