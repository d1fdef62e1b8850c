"""The sign-in and consent pages at the wire (Django's test client): where the answer goes, switching account,
refusals and Cancel answered to the client (``access_denied`` with ``state`` and ``iss``), and where sign-in
lands without ``next``. Their look is tested in a real browser (``tests/e2e/test_oauth_pages_browser.py``)."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from mcp_app.models import OAuthConsent, TenantMembership
from tests.oauth_flow import ORIGIN, REDIRECT, authorize, authorize_params, consent_form, pkce, redirect_query, register

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-oauth-pages-password"


def _consent_page(client: Client, user: Any, server: Any, redirect_uri: str = REDIRECT, **stated: Any) -> str:
    registered = register(client, [redirect_uri], name="Claude", **stated)
    client.force_login(user)
    params = authorize_params(registered["client_id"], server.server_id, pkce()[1], redirect_uri=redirect_uri)
    response = client.get("/oauth/authorize/", params)
    assert response.status_code == 200, response.content[:800]
    return response.content.decode()


def _destination(page: str) -> str:
    match = re.search(r'<div id="redirect-destination"[^>]*>(.*?)</div>\s*</div>', page, re.S)
    assert match, "the consent page does not say where the answer goes"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", match.group(1))).split())


def test_consent_page_names_the_host_the_code_is_sent_to(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    page = _consent_page(
        client, user, access.server, "https://collector.evil.example/cb", client_uri="https://claude.ai"
    )
    destination = _destination(page)
    assert "the answer goes to collector.evil.example" in destination
    assert "says it is claude.ai" in destination  # its stated address is not where the code goes
    assert "this device" not in destination


def test_consent_page_warns_of_a_loopback_redirect(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    destination = _destination(_consent_page(client, user, access.server, "http://127.0.0.1:45678/callback"))
    assert "127.0.0.1:45678" in destination
    assert "application on this device" in destination


def _link_to_client(page: str) -> dict[str, list[str]]:
    """The query of the page's one link back to the client's redirect URI."""
    hrefs = [html.unescape(href) for href in re.findall(r'href="([^"]+)"', page)]
    back = [href for href in hrefs if href.startswith(REDIRECT + "?")]
    assert len(back) == 1, hrefs
    return parse_qs(urlsplit(back[0]).query)


def test_a_refusal_offers_access_denied_back_to_the_client(
    client: Client, oauth_world: Any, member_factory: Any
) -> None:
    access, _member = oauth_world
    outsider = member_factory(is_staff=False)
    response = authorize(client, outsider, access.server)
    assert response.status_code == 403
    page = response.content.decode()
    assert "not a member" in page
    query = _link_to_client(page)
    assert query["error"] == ["access_denied"]
    assert query["state"] == ["st4te"]
    assert query["iss"] == [ORIGIN]
    assert 'action="/oauth/logout/"' in page  # and a way to sign in as someone else
    assert not OAuthConsent.objects.exists()


def test_cancel_answers_access_denied_with_state_and_iss(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    form, _verifier = consent_form(client, user, access.server)
    query = redirect_query(client.post("/oauth/authorize/", form))  # no "allow": Cancel
    assert query["error"] == "access_denied"
    assert query["state"] == "st4te"
    assert query["iss"] == ORIGIN
    assert not OAuthConsent.objects.exists()


def test_a_refusal_after_the_page_was_shown_answers_the_client(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    form, _verifier = consent_form(client, user, access.server)  # the page is shown
    TenantMembership.objects.filter(user=user).delete()  # no longer a member when Authorize is pressed
    query = redirect_query(client.post("/oauth/authorize/", {**form, "allow": "Authorize", "grant": "all"}))
    assert query["error"] == "access_denied"
    assert query["state"] == "st4te"
    assert query["iss"] == ORIGIN
    assert not OAuthConsent.objects.exists()


def test_switch_account_comes_back_to_the_same_authorization_request(
    client: Client, oauth_world: Any, member_factory: Any
) -> None:
    access, _member = oauth_world
    first = member_factory(username="first-person", is_staff=False)
    member_factory((access.tenant, "viewer"), username="second-person", password=PASSWORD, is_staff=False)
    shown = authorize(client, first, access.server)
    assert shown.status_code == 403  # the first person is not a member
    page = shown.content.decode()
    switch = re.search(r'<form id="switch-account" method="post" action="([^"]+)">(.*?)</form>', page, re.S)
    assert switch, "no way to switch account"
    comes_back = re.search(r'name="next" value="([^"]+)"', switch.group(2))
    assert comes_back, "switching account forgets the authorization request"
    back_to = html.unescape(comes_back.group(1))
    assert back_to.startswith("/oauth/authorize/?")

    signed_out = client.post(switch.group(1), {"next": back_to})
    assert signed_out.status_code == 302 and signed_out["Location"] == back_to
    to_login = client.get(back_to)
    assert to_login.status_code == 302 and to_login["Location"].startswith("/oauth/login/?next=")
    signed_in = client.post(to_login["Location"], {"username": "second-person", "password": PASSWORD})
    assert signed_in.status_code == 302 and signed_in["Location"] == back_to
    consent = client.get(back_to)
    assert consent.status_code == 200
    assert 'id="signed-in-as">second-person<' in consent.content.decode()


def test_sign_in_without_next_lands_on_the_persons_consents(client: Client, member_factory: Any) -> None:
    member_factory(username="someone", password=PASSWORD, is_staff=False)
    signed_in = client.post("/oauth/login/", {"username": "someone", "password": PASSWORD})
    assert signed_in.status_code == 302
    assert signed_in["Location"] == "/oauth/consents/"
    assert client.get(signed_in["Location"]).status_code == 200
    assert client.get("/oauth/login/")["Location"] == "/oauth/consents/"  # already signed in
