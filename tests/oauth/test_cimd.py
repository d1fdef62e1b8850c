"""Client ID metadata documents at the authorization endpoint: fetched over HTTPS through netguard, bounded in
size and time, their redirect URIs enforced, cached by their Cache-Control."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.cimd_server import REDIRECT, CimdServer, cimd_server
from tests.oauth_flow import authorize_params, pkce

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CimdServer]:
    with cimd_server(tmp_path, slow_seconds=2.0) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_path))
        yield server


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_CIMD_ALLOWED_NETWORKS": ["127.0.0.1/32"]}


def _authorize(client: Client, user: Any, server: Any, client_id: str, **extra: Any) -> Any:
    client.force_login(user)
    params = authorize_params(client_id, server.server_id, pkce()[1], **{"redirect_uri": REDIRECT, **extra})
    return client.get("/oauth/authorize/", params)


def test_a_document_on_an_allowed_loopback_is_used(
    client: Client, oauth_world: Any, documents: CimdServer, loopback_allowed: None
) -> None:
    access, user = oauth_world
    url = documents.url("client", secrets.token_hex(4))
    page = _authorize(client, user, access.server, url)
    assert page.status_code == 200, page.content[:500]
    assert b"CIMD test client" in page.content and b"Not verified" in page.content
    assert b"https://client.example/" in page.content
    # Cached by its Cache-Control: a second authorization does not fetch again.
    assert _authorize(client, user, access.server, url).status_code == 200
    assert documents.fetched.count(url.removeprefix(documents.base)) == 1
    # Its redirect URIs are enforced.
    wrong = _authorize(client, user, access.server, url, redirect_uri="http://127.0.0.1:47322/elsewhere")
    assert wrong.status_code == 400


def test_the_outbound_allow_list_admits_a_loopback_document_too(
    client: Client, oauth_world: Any, documents: CimdServer, settings: Any
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "OUTBOUND_ALLOWED_NETWORKS": ["127.0.0.1"]}
    access, user = oauth_world
    url = documents.url("client", secrets.token_hex(4))
    page = _authorize(client, user, access.server, url)
    assert page.status_code == 200, page.content[:500]
    assert documents.fetched == [url.removeprefix(documents.base)]


def test_a_private_address_is_refused(client: Client, oauth_world: Any, documents: CimdServer) -> None:
    access, user = oauth_world
    url = documents.url("client", secrets.token_hex(4))
    response = _authorize(client, user, access.server, url)
    assert response.status_code in (400, 401)
    assert documents.fetched == []  # refused before any connection


def test_an_oversized_document_is_refused(
    client: Client, oauth_world: Any, documents: CimdServer, loopback_allowed: None
) -> None:
    access, user = oauth_world
    response = _authorize(client, user, access.server, documents.url("big", secrets.token_hex(4)))
    assert response.status_code in (400, 401)
    assert len(documents.fetched) == 1


def test_a_slow_document_is_refused(
    client: Client, oauth_world: Any, documents: CimdServer, loopback_allowed: None, settings: Any
) -> None:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": 0.5}
    access, user = oauth_world
    response = _authorize(client, user, access.server, documents.url("slow", secrets.token_hex(4)))
    assert response.status_code in (400, 401)
