"""The authorization server at the wire (Django's test client): metadata, PKCE, redirect URIs, resource
indicators, consent, refresh rotation, revocation, registration."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from mcp_app.models import AgentToken, OAuthAgent, OAuthConsent
from tests.helpers import call, rpc
from tests.oauth_flow import (
    ORIGIN,
    REDIRECT,
    Issued,
    authorize,
    authorize_params,
    consent_form,
    pkce,
    redirect_query,
    refresh,
    register,
    run_flow,
    token_request,
)

pytestmark = pytest.mark.django_db(transaction=True)

LIST = rpc("tools/list")


def _served(server: Any, access_token: str) -> Any:
    """The MCP server's answer to ``tools/list`` with this access token (the real consumer, no agentId)."""
    return async_to_sync(call)(Issued("", access_token, "", server, None), LIST)


def _consent_form(client: Client, user: Any, server: Any) -> tuple[dict[str, Any], str]:
    """The consent page's form fields with Authorize pressed for every tool, and the PKCE verifier."""
    form, verifier = consent_form(client, user, server)
    return {**form, "allow": "Authorize", "grant": "all"}, verifier


def _consent(client: Client, user: Any, server: Any, **changed: Any) -> Any:
    """The answer to the consent form posted back with ``changed`` fields (else Authorize for every tool)."""
    form, _verifier = _consent_form(client, user, server)
    return client.post("/oauth/authorize/", {**form, **changed})


def _exchange(client: Client, form: dict[str, Any], code: str, verifier: str, **fields: Any) -> Any:
    """The token endpoint's answer to exchanging ``code`` (``fields`` change or, ``None``, leave out a field)."""
    sent = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": form["client_id"],
        "code_verifier": verifier,
        "resource": form["resource"],
        **fields,
    }
    return token_request(client, **sent)


def test_authorization_server_metadata(client: Client) -> None:
    meta = client.get("/.well-known/oauth-authorization-server").json()
    assert meta["issuer"] == ORIGIN
    assert meta["authorization_endpoint"] == f"{ORIGIN}/oauth/authorize/"
    assert meta["token_endpoint"] == f"{ORIGIN}/oauth/token/"
    assert meta["revocation_endpoint"] == f"{ORIGIN}/oauth/revoke/"
    assert meta["registration_endpoint"] == f"{ORIGIN}/oauth/register/"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["response_types_supported"] == ["code"]
    assert set(meta["grant_types_supported"]) == {"authorization_code", "refresh_token"}
    assert meta["client_id_metadata_document_supported"] is True
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert "none" in meta["token_endpoint_auth_methods_supported"]


def test_protected_resource_metadata(client: Client, oauth_world: Any) -> None:
    access, _user = oauth_world
    response = client.get(f"/.well-known/oauth-protected-resource/mcp/{access.server.server_id}")
    assert response.status_code == 200
    meta = response.json()
    assert meta["resource"] == f"{ORIGIN}/mcp/{access.server.server_id}"
    assert meta["authorization_servers"] == [ORIGIN]
    assert meta["scopes_supported"] == ["mcp"]
    assert meta["bearer_methods_supported"] == ["header"]
    assert meta["resource_name"] == access.server.name
    assert client.get("/.well-known/oauth-protected-resource/mcp/nope").status_code == 404
    access.server.oauth_enabled = False
    access.server.save()
    assert client.get(f"/.well-known/oauth-protected-resource/mcp/{access.server.server_id}").status_code == 404


def test_pkce_missing_is_refused(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    response = authorize(client, user, access.server, code_challenge=None, code_challenge_method=None)
    assert redirect_query(response)["error"] == "invalid_request"


def test_pkce_plain_is_refused(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    response = authorize(client, user, access.server, code_challenge="x" * 50, code_challenge_method="plain")
    assert redirect_query(response)["error"] == "invalid_request"


def test_wrong_verifier_is_refused(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    form, _verifier = _consent_form(client, user, access.server)
    code = redirect_query(client.post("/oauth/authorize/", form))["code"]
    token = _exchange(client, form, code, pkce()[0])
    assert token.status_code == 400
    assert token.json()["error"] == "invalid_grant"


def test_redirect_uri_mismatch_is_refused(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    response = authorize(client, user, access.server, redirect_uri="http://127.0.0.1:33333/elsewhere")
    assert response.status_code == 400  # never redirected to an unregistered URI
    assert b"Mismatching redirect URI" in response.content or b"invalid_request" in response.content


def test_loopback_redirect_on_any_port(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    response = authorize(client, user, access.server, redirect_uri="http://127.0.0.1:45678/callback")
    assert response.status_code == 200


@pytest.mark.parametrize("resource", [None, "http://testserver/mcp/other-server", "https://elsewhere.example/mcp/x"])
def test_missing_or_foreign_resource_is_refused(client: Client, oauth_world: Any, resource: Any) -> None:
    access, user = oauth_world
    response = authorize(client, user, access.server, resource=resource)
    assert redirect_query(response)["error"] == "invalid_target"


def test_token_endpoint_requires_the_resource(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    form, verifier = _consent_form(client, user, access.server)
    code = redirect_query(client.post("/oauth/authorize/", form))["code"]
    missing = _exchange(client, form, code, verifier, resource=None)
    assert missing.status_code == 400, missing.content[:3000]
    assert json.loads(missing.content)["error"] == "invalid_target"


def test_consent_by_an_outsider_is_refused(client: Client, oauth_world: Any, member_factory: Any) -> None:
    access, _member = oauth_world
    outsider = member_factory(is_staff=False)
    response = authorize(client, outsider, access.server)
    assert response.status_code == 403
    assert b"not a member" in response.content
    assert not OAuthConsent.objects.exists()


def test_open_consent_lets_any_signed_in_user(client: Client, oauth_world: Any, member_factory: Any) -> None:
    access, _member = oauth_world
    access.server.oauth_open_consent = True
    access.server.save()
    assert authorize(client, member_factory(is_staff=False), access.server).status_code == 200


def test_login_required_sends_to_login_page(client: Client, oauth_world: Any) -> None:
    access, _user = oauth_world
    registered = register(client)
    response = client.get(
        "/oauth/authorize/", authorize_params(registered["client_id"], access.server.server_id, pkce()[1])
    )
    assert response.status_code == 302
    assert response["Location"].startswith("/oauth/login/?next=")
    page = client.get(response["Location"])
    assert page.status_code == 200
    assert b'name="username"' in page.content and b'name="password"' in page.content


def test_consent_creates_agent_and_is_remembered(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    issued = run_flow(client, user, access.server)
    link = OAuthAgent.objects.get()
    assert (link.user, link.tenant, link.application.client_id) == (user, access.tenant, issued.client_id)
    mirror = AgentToken.objects.get(oauth_consent__isnull=False)
    assert mirror.agent == link.agent and list(mirror.servers.all()) == [access.server]
    assert issued.access_token.startswith("mcp_")
    # Stored as digests only (DOT's hashed storage and the mirror).
    from oauth2_provider.models import AccessToken, RefreshToken

    assert AccessToken.objects.get(user=user).token == ""
    assert RefreshToken.objects.get(user=user).token == ""
    # Same client asks again: no consent page, straight back with a code.
    _verifier, challenge = pkce()
    again = client.get("/oauth/authorize/", authorize_params(issued.client_id, access.server.server_id, challenge))
    assert "code" in redirect_query(again)
    forced = client.get(
        "/oauth/authorize/", authorize_params(issued.client_id, access.server.server_id, challenge, prompt="consent")
    )
    assert forced.status_code == 200


def test_read_only_grant_is_bound_into_the_token(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    run_flow(client, user, access.server, grant={"grant": "read_only"})
    assert AgentToken.objects.get(oauth_consent__isnull=False).read_only


def test_refresh_rotates_and_old_tokens_stop(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    issued = run_flow(client, user, access.server)
    refreshed = refresh(client, issued)
    assert refreshed.status_code == 200, refreshed.content
    body = refreshed.json()
    assert body["refresh_token"] != issued.refresh_token
    assert not AgentToken.objects.authenticate(issued.access_token)
    assert AgentToken.objects.authenticate(body["access_token"])
    reused = refresh(client, issued)
    assert reused.status_code == 400


def test_revocation_endpoint_revokes_the_mirror(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    issued = run_flow(client, user, access.server)
    response = client.post("/oauth/revoke/", {"token": issued.access_token, "client_id": issued.client_id})
    assert response.status_code == 200
    assert not AgentToken.objects.authenticate(issued.access_token)


def test_withdrawing_consent_and_deactivating_users_revoke(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    issued = run_flow(client, user, access.server)
    OAuthConsent.objects.get().withdraw()
    assert not AgentToken.objects.authenticate(issued.access_token)
    refreshed = refresh(client, issued)
    assert refreshed.status_code == 400
    second = run_flow(Client(), user, access.server)
    user.is_active = False
    user.save()
    assert not AgentToken.objects.authenticate(second.access_token)


def test_deleting_the_client_revokes(client: Client, oauth_world: Any) -> None:
    from oauth2_provider.models import Application

    access, user = oauth_world
    issued = run_flow(client, user, access.server)
    Application.objects.filter(client_id=issued.client_id).get().delete()
    assert not AgentToken.objects.authenticate(issued.access_token)


def test_dynamic_clients_per_tenant_switch(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    access.tenant.oauth_dynamic_clients = False
    access.tenant.save()
    response = authorize(client, user, access.server)
    assert response.status_code == 403
    assert b"pre-registered" in response.content


def _registration(client: Client) -> Any:
    return client.post(
        "/oauth/register/",
        data={"client_name": "x", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
        content_type="application/json",
    )


def test_registrations_from_one_address_are_not_refused_after_twenty(client: Client) -> None:
    # Hosted connectors register once per person from a few shared addresses: the default burst takes more.
    for _ in range(40):
        assert _registration(client).status_code == 201


def test_registration_over_its_rate_answers_429_with_retry_after(client: Client, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_REGISTRATIONS_PER_HOUR": 60, "OAUTH_REGISTRATION_BURST": 3}
    for _ in range(3):
        assert _registration(client).status_code == 201
    response = _registration(client)
    assert response.status_code == 429
    assert response.json()["error"] == "rate_limited"
    # 60 per hour: the next one is a minute away at most.
    assert 1 <= int(response["Retry-After"]) <= 60
    # Another address has its own bucket.
    assert _registration(Client(REMOTE_ADDR="192.0.2.7")).status_code == 201


def test_registration_off_is_refused(client: Client, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_REGISTRATIONS_PER_HOUR": 0}
    response = _registration(client)
    assert response.status_code in (401, 403)
    assert response.json()["error"] == "access_denied"


def test_plain_http_redirect_only_on_loopback(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    registered = register(client, redirect_uris=["http://client.example/callback"])
    client.force_login(user)
    params = authorize_params(registered["client_id"], access.server.server_id, pkce()[1])
    params["redirect_uri"] = "http://client.example/callback"
    response = client.get("/oauth/authorize/", params)
    assert response.status_code == 400  # never redirected over plain http to a non-loopback host


def test_consent_page_shows_what_the_client_says_marked_not_verified(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    response = client.post(
        "/oauth/register/",
        data={
            "client_name": "Shiny client",
            "client_uri": "https://shiny.example/",
            "logo_uri": "https://shiny.example/logo.png",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
        },
        content_type="application/json",
    )
    assert response.status_code == 201
    client.force_login(user)
    params = authorize_params(response.json()["client_id"], access.server.server_id, pkce()[1])
    page = client.get("/oauth/authorize/", params).content.decode()
    assert "Shiny client" in page and 'href="https://shiny.example/"' in page
    assert 'src="https://shiny.example/logo.png"' in page
    assert "Not verified" in page
    assert access.server.server_id in page and access.tenant.name in page


def test_a_reused_code_is_refused_and_revokes_what_its_first_exchange_issued(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    form, verifier = _consent_form(client, user, access.server)
    code = redirect_query(client.post("/oauth/authorize/", form))["code"]
    first = _exchange(client, form, code, verifier)
    assert first.status_code == 200, first.content
    family = Issued(form["client_id"], "", first.json()["refresh_token"], access.server, user)
    refreshed = refresh(client, family)
    assert refreshed.status_code == 200, refreshed.content
    tokens = refreshed.json()
    assert _served(access.server, tokens["access_token"]).status == 200

    again = _exchange(client, form, code, verifier)
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"
    # Everything descended from the first exchange stops: the current access token and refresh token.
    reply = _served(access.server, tokens["access_token"])
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
    refused = refresh(client, family, refresh_token=tokens["refresh_token"])
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    "tampered",
    [
        {"grant": "everything-and-more"},
        {"grant": "chosen", "tools": ["999999"]},
        {"grant": "chosen", "tools": ["not-a-number"]},
    ],
    ids=["unknown grant", "unknown tool", "malformed tool"],
)
def test_a_tampered_consent_form_is_refused_without_a_code(
    client: Client, oauth_world: Any, tampered: dict[str, Any]
) -> None:
    access, user = oauth_world
    response = _consent(client, user, access.server, **tampered)
    assert response.status_code == 400
    assert "Location" not in response
    assert not OAuthConsent.objects.exists()


def test_a_consent_form_may_not_grant_another_tenants_tool(
    client: Client, oauth_world: Any, access_factory: Any
) -> None:
    access, user = oauth_world
    from mcp_app.models import Tool

    elsewhere = access_factory()  # another tenant, with the same demo tools
    theirs = Tool.objects.filter(tenant=elsewhere.tenant).first()
    assert theirs is not None
    response = _consent(client, user, access.server, grant="chosen", tools=[str(theirs.pk)])
    assert response.status_code == 400
    assert "Location" not in response
    assert not OAuthConsent.objects.exists()


@pytest.mark.parametrize(
    "tampered",
    [{"code_challenge": ""}, {"code_challenge_method": ""}, {"code_challenge_method": "plain"}],
    ids=["no challenge", "no method", "plain"],
)
def test_a_consent_form_without_an_s256_challenge_yields_no_code(
    client: Client, oauth_world: Any, tampered: dict[str, Any]
) -> None:
    access, user = oauth_world
    query = redirect_query(_consent(client, user, access.server, **tampered))
    assert "code" not in query
    assert not OAuthConsent.objects.exists()  # nothing remembered: the next authorization asks again
    assert query["error"] == "invalid_request"
    assert query["state"] == "st4te"
    assert query["iss"] == ORIGIN


def test_error_redirects_carry_the_issuer(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    form, _verifier = _consent_form(client, user, access.server)
    cancelled = redirect_query(client.post("/oauth/authorize/", {k: v for k, v in form.items() if k != "allow"}))
    assert (cancelled["error"], cancelled["iss"], cancelled["state"]) == ("access_denied", ORIGIN, "st4te")
    plain = redirect_query(
        authorize(client, user, access.server, code_challenge="x" * 50, code_challenge_method="plain")
    )
    assert (plain["error"], plain["iss"]) == ("invalid_request", ORIGIN)
    foreign = redirect_query(authorize(client, user, access.server, resource="https://elsewhere.example/mcp/x"))
    assert (foreign["error"], foreign["iss"]) == ("invalid_target", ORIGIN)


def _downgrade_without_signals(issued: Issued, settings: Any) -> None:
    from mcp_app.models import TenantMembership

    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_CONSENT_ROLE": "admin"}
    TenantMembership.objects.filter(user=issued.user).update(role="viewer")


def _close_open_consent_without_signals(issued: Issued, settings: Any) -> None:
    from mcp_app.models import McpServer, TenantMembership

    McpServer.objects.filter(pk=issued.server.pk).update(oauth_open_consent=False)
    assert not TenantMembership.objects.filter(user=issued.user).exists()


def _deactivate_without_signals(issued: Issued, settings: Any) -> None:
    from django.contrib.auth import get_user_model

    get_user_model().objects.filter(pk=issued.user.pk).update(is_active=False)


@pytest.mark.parametrize(
    "change",
    [_downgrade_without_signals, _close_open_consent_without_signals, _deactivate_without_signals],
    ids=["role downgraded", "open consent switched off", "user deactivated"],
)
def test_eligibility_is_checked_at_token_use_and_refresh_not_only_by_signals(
    client: Client, oauth_world: Any, settings: Any, change: Any
) -> None:
    """A change that sends no signal (a queryset ``update()``) still ends access: the token is refused once its
    cached snapshot goes (``IDENTITY_CACHE_MAX_AGE_SECONDS``; here the caches are cleared), the refresh at once."""
    from mcp_app.caching import identity
    from mcp_app.models import TenantMembership

    access, user = oauth_world
    if change is _downgrade_without_signals:
        TenantMembership.objects.filter(user=user).update(role="admin")
    if change is _close_open_consent_without_signals:
        TenantMembership.objects.filter(user=user).delete()
        access.server.oauth_open_consent = True
        access.server.save()
    issued = run_flow(client, user, access.server)
    assert _served(access.server, issued.access_token).status == 200
    change(issued, settings)
    identity.clear()
    reply = _served(access.server, issued.access_token)
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
    assert "resource_metadata=" in reply.headers["www-authenticate"]
    refused = refresh(client, issued)
    assert refused.status_code == 400
    assert json.loads(refused.content)["error"] == "invalid_grant"


@pytest.mark.parametrize("deleted", ["person", "tenant", "server"])
def test_deleting_what_a_consent_hangs_on_ends_its_tokens(client: Client, oauth_world: Any, deleted: str) -> None:
    """The membership and server signals run inside cascades too (a person or tenant deleted with consents)."""
    access, user = oauth_world
    issued = run_flow(client, user, access.server)
    {"person": user, "tenant": access.tenant, "server": access.server}[deleted].delete()
    assert _served(access.server, issued.access_token).status in (401, 404)
    assert not AgentToken.objects.filter(oauth_consent__isnull=False, revoked_at__isnull=True).exists()


def test_a_role_below_the_consent_role_may_not_consent(client: Client, oauth_world: Any, settings: Any) -> None:
    access, user = oauth_world  # a viewer
    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_CONSENT_ROLE": "admin"}
    response = authorize(client, user, access.server)
    assert response.status_code == 403
    assert b"does not allow it" in response.content
    assert not OAuthConsent.objects.exists()
