"""Client ID metadata documents at the authorization endpoint: fetched over HTTPS through netguard, bounded in
size and in time (one deadline over the whole fetch, however slowly the host answers), bounded per host in
number (a slow host never holds up another host's clients), their redirect URIs enforced, cached by their
Cache-Control."""

from __future__ import annotations

import secrets
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from mcp_app import outbound
from tests.cimd_server import HOSTS, REDIRECT, CimdServer, cimd_server
from tests.helpers import wait_until_blocking
from tests.oauth_flow import authorize_params, pkce

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CimdServer]:
    with cimd_server(tmp_path, slow_seconds=2.0) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_path))
        monkeypatch.setattr(outbound, "ssl_context", lambda: ssl.create_default_context(cafile=str(server.ca_path)))
        real = outbound.resolver

        async def resolve(host: str, port: int) -> list[str]:
            return ["127.0.0.1"] if host in HOSTS else await real(host, port)

        monkeypatch.setattr(outbound, "resolver", resolve)
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


def test_a_dripped_document_is_cut_off_at_the_deadline(
    client: Client, oauth_world: Any, documents: CimdServer, loopback_allowed: None, settings: Any
) -> None:
    # Each byte comes well within any per-read timeout; only a deadline over the whole fetch stops it.
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": 1}
    access, user = oauth_world
    started = time.monotonic()
    response = _authorize(client, user, access.server, documents.url("drip", secrets.token_hex(4)))
    elapsed = time.monotonic() - started
    assert response.status_code in (400, 401)
    assert elapsed < 3.0, elapsed  # 1 s, and the slack of a loaded machine; the drip takes a minute


def _authorize_in_thread(user: Any, server: Any, client_id: str, results: list[int]) -> threading.Thread:
    def run() -> None:
        from django.db import connection

        try:
            results.append(_authorize(Client(), user, server, client_id).status_code)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _fetches_per_host(settings: Any, bound: int, timeout: float) -> None:
    """Documents on the loopback allowed, at most ``bound`` fetches from one host at once, each within ``timeout``
    seconds."""
    settings.MCP_APP = {
        **settings.MCP_APP,
        "OAUTH_CIMD_ALLOWED_NETWORKS": ["127.0.0.1"],
        "OAUTH_CIMD_FETCHES_PER_HOST": bound,
    }
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": timeout}


def _drips_under_way(
    user: Any, server: Any, documents: CimdServer, host: str, count: int, results: list[int]
) -> list[threading.Thread]:
    """``count`` authorizations in threads (their status codes into ``results``) whose documents drip from
    ``host``, once all of them are being fetched."""
    threads = [
        _authorize_in_thread(user, server, documents.url("drip", secrets.token_hex(4), host), results)
        for _ in range(count)
    ]
    wait_until_blocking(lambda: documents.under_way[0] >= count, timeout=10)
    return threads


def test_slow_documents_of_one_host_do_not_hold_up_another_hosts_clients(
    client: Client, oauth_world: Any, documents: CimdServer, settings: Any
) -> None:
    _fetches_per_host(settings, 10, timeout=4)
    access, user = oauth_world
    slow_host, other_host = HOSTS
    results: list[int] = []
    threads = _drips_under_way(user, access.server, documents, slow_host, 10, results)  # ten from one host
    page = _authorize(client, user, access.server, documents.url("client", secrets.token_hex(4), other_host))
    assert page.status_code == 200, page.content[:500]
    for thread in threads:
        thread.join(timeout=15)
    assert results and set(results) <= {400, 401}


def test_a_fetch_beyond_its_hosts_bound_waits_and_gives_up_without_connecting(
    client: Client, oauth_world: Any, documents: CimdServer, settings: Any
) -> None:
    _fetches_per_host(settings, 2, timeout=8)
    access, user = oauth_world
    host = HOSTS[0]
    results: list[int] = []
    threads = _drips_under_way(user, access.server, documents, host, 2, results)  # the host's two slots are taken
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": 1}  # for the third
    name = secrets.token_hex(4)
    started = time.monotonic()
    response = _authorize(client, user, access.server, documents.url("client", name, host))
    assert response.status_code in (400, 401)
    assert time.monotonic() - started < 3.0  # its own deadline, not the drips'
    assert f"/client/{name}.json" not in documents.fetched  # it never connected
    assert documents.under_way[1] == 2  # never more than the bound at once
    for thread in threads:
        thread.join(timeout=15)
    assert sorted(results) == [400, 400]
