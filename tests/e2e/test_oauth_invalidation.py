"""OAuth tokens on two daphne processes: revoking the access token (RFC 7009 endpoint), withdrawing the consent,
deleting the client, deactivating the user or the token's expiry reach both processes within a second (the same
invalidation log as agent tokens, ``tests/e2e/test_invalidation_across_processes.py``). So does the person losing
eligibility (removed from the tenant, role below ``OAUTH_CONSENT_ROLE``, the server's open consent switched off,
deactivated), and their refresh token is refused from then on."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from tests.helpers import served_then_refused
from tests.oauth_flow import Issued, delete_client, refresh, run_flow

pytestmark = pytest.mark.e2e


def revoke_at_endpoint(issued: Issued) -> None:
    response = Client().post("/oauth/revoke/", {"token": issued.access_token, "client_id": issued.client_id})
    assert response.status_code == 200


def withdraw(issued: Issued) -> None:
    from mcp_app.models import OAuthConsent

    OAuthConsent.objects.get(user=issued.user, application__client_id=issued.client_id).withdraw()


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
    change: str, daphne_url: str, second_daphne: Any, oauth: Issued
) -> None:
    await served_then_refused(oauth, (daphne_url, second_daphne.url), lambda: CHANGES[change](oauth), what=change)


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
    await served_then_refused(issued, (daphne_url, second_daphne.url), lambda: end(issued), what=change)
    refused = await database_sync_to_async(refresh)(Client(), issued)
    assert refused.status_code == 400, refused.content
    assert json.loads(refused.content)["error"] == "invalid_grant"
