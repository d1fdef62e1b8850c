"""The isolation matrix extended to OAuth (admin, API, MCP): Acme and Globex each have a member who authorized
an OAuth client on their tenant's server. Globex's owner, admin and viewer see and withdraw only Globex's
consents and OAuth agents; viewers withdraw nothing. (MCP: an OAuth token at another tenant's server is 401,
``tests/transport/test_oauth.py``.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from mcp_app.models import AgentToken, ApiKey, OAuthAgent, OAuthConsent
from tests.oauth_flow import Issued, run_flow

pytestmark = pytest.mark.django_db(transaction=True)

ROLES = ("owner", "admin", "viewer")


@pytest.fixture
def tenants(world_factory: Any, member_factory: Any) -> dict[str, tuple[Any, Issued]]:
    out = {}
    for slug in ("acme", "globex"):
        world = world_factory(slug)
        person = member_factory((world.tenant, "viewer"), username=f"{slug}-person", is_staff=False)
        out[slug] = (world, run_flow(Client(), person, world.access.server))
    return out


def _consent(issued: Issued) -> OAuthConsent:
    return OAuthConsent.objects.get(user=issued.user)


def _agent(issued: Issued) -> OAuthAgent:
    return OAuthAgent.objects.get(user=issued.user)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("model", ["oauthconsent", "oauthagent"])
def test_admin_shows_only_the_own_tenant(tenants: Any, role: str, model: str) -> None:
    (_acme, acme_issued), (globex, globex_issued) = tenants["acme"], tenants["globex"]
    client = Client()
    client.force_login(globex.users[role])
    mine = (_consent if model == "oauthconsent" else _agent)(globex_issued)
    theirs = (_consent if model == "oauthconsent" else _agent)(acme_issued)
    page = client.get(reverse(f"admin:mcp_app_{model}_changelist"))
    assert page.status_code == 200
    content = page.content.decode()
    assert reverse(f"admin:mcp_app_{model}_change", args=[mine.pk]) in content
    assert reverse(f"admin:mcp_app_{model}_change", args=[theirs.pk]) not in content
    assert client.get(reverse(f"admin:mcp_app_{model}_change", args=[theirs.pk])).status_code == 404


@pytest.mark.parametrize("role", ROLES)
def test_admin_withdraw_action_reaches_only_what_the_role_may_change(tenants: Any, role: str) -> None:
    (_acme, acme_issued), (globex, globex_issued) = tenants["acme"], tenants["globex"]
    client = Client()
    client.force_login(globex.users[role])
    both = [_consent(acme_issued).pk, _consent(globex_issued).pk]
    client.post(
        reverse("admin:mcp_app_oauthconsent_changelist"),
        {"action": "withdraw", "_selected_action": both, "index": 0},
    )
    assert OAuthConsent.objects.filter(user=acme_issued.user).exists()
    assert OAuthConsent.objects.filter(user=globex_issued.user).exists() == (role == "viewer")
    assert AgentToken.objects.authenticate(acme_issued.access_token) is not None


def _api(user: Any) -> APIClient:
    _, raw = ApiKey.objects.issue_key(user, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("endpoint", ["oauth-consents", "oauth-agents"])
def test_api_lists_only_the_own_tenant(tenants: Any, role: str, endpoint: str) -> None:
    (_acme, acme_issued), (globex, globex_issued) = tenants["acme"], tenants["globex"]
    client = _api(globex.users[role])
    pick = _consent if endpoint == "oauth-consents" else _agent
    listed = client.get(f"/api/v1/{endpoint}/")
    assert listed.status_code == 200
    ids = {item["id"] for item in listed.json()["results"]}
    assert ids == {pick(globex_issued).pk}
    assert client.get(f"/api/v1/{endpoint}/{pick(acme_issued).pk}/").status_code == 404
    if endpoint == "oauth-agents":
        item = listed.json()["results"][0]
        assert (item["username"], item["client_id"]) == ("globex-person", globex_issued.client_id)


@pytest.mark.parametrize("role", ROLES)
def test_api_withdraw(tenants: Any, role: str) -> None:
    (_acme, acme_issued), (globex, globex_issued) = tenants["acme"], tenants["globex"]
    client = _api(globex.users[role])
    assert client.post(f"/api/v1/oauth-consents/{_consent(acme_issued).pk}/withdraw/").status_code == 404
    response = client.post(f"/api/v1/oauth-consents/{_consent(globex_issued).pk}/withdraw/")
    assert response.status_code == (403 if role == "viewer" else 204)
    assert (AgentToken.objects.authenticate(globex_issued.access_token) is None) == (role != "viewer")
