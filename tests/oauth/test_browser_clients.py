"""CORS of the authorization server for clients in a browser page (the Inspector): metadata, registration, token
and revocation answer any origin with ``*`` and no credentials, preflights included; the pages a person
navigates to (authorization, sign-in) do not."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.oauth_flow import REDIRECT, token_request

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "http://localhost:6274"  # the Inspector's origin: not the server's


def _preflight(client: Client, path: str, method: str, headers: str) -> Any:
    return client.options(
        path,
        headers={"Origin": PAGE, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers},
    )


def _public_endpoints(server_id: str) -> list[tuple[str, str, str]]:
    return [
        ("/.well-known/oauth-authorization-server", "GET", "mcp-protocol-version"),
        (f"/.well-known/oauth-protected-resource/mcp/{server_id}", "GET", "mcp-protocol-version"),
        ("/oauth/register/", "POST", "content-type"),
        ("/oauth/token/", "POST", "content-type, authorization"),
        ("/oauth/revoke/", "POST", "content-type"),
    ]


def test_preflights_of_the_public_endpoints_are_answered(client: Client, oauth_world: Any) -> None:
    access, _user = oauth_world
    for path, method, requested in _public_endpoints(access.server.server_id):
        reply = _preflight(client, path, method, requested)
        assert reply.status_code == 204, path
        assert reply["Access-Control-Allow-Origin"] == "*"
        assert method in reply["Access-Control-Allow-Methods"]
        allowed = {name.strip().lower() for name in reply["Access-Control-Allow-Headers"].split(",")}
        assert {name.strip() for name in requested.split(",")} <= allowed, path
        assert int(reply["Access-Control-Max-Age"]) > 0
        assert "Access-Control-Allow-Credentials" not in reply


def test_answers_of_the_public_endpoints_are_readable_from_any_origin(client: Client, oauth_world: Any) -> None:
    access, _user = oauth_world
    headers = {"Origin": PAGE}
    replies = {
        "as metadata": client.get("/.well-known/oauth-authorization-server", headers=headers),
        "resource metadata": client.get(
            f"/.well-known/oauth-protected-resource/mcp/{access.server.server_id}", headers=headers
        ),
        "unknown resource": client.get("/.well-known/oauth-protected-resource/mcp/nope", headers=headers),
        "registration": client.post(
            "/oauth/register/",
            data={"client_name": "In a browser", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
            content_type="application/json",
            headers=headers,
        ),
        "token error": token_request(client, grant_type="authorization_code", code="nope", client_id="nope"),
        "revocation": client.post("/oauth/revoke/", data={"token": "nope", "client_id": "nope"}, headers=headers),
    }
    assert replies["as metadata"].status_code == 200 and replies["registration"].status_code == 201
    assert replies["unknown resource"].status_code == 404 and replies["token error"].status_code in (400, 401)
    for name, reply in replies.items():
        assert reply["Access-Control-Allow-Origin"] == "*", name
        assert "Access-Control-Allow-Credentials" not in reply, name
        assert "WWW-Authenticate" in reply["Access-Control-Expose-Headers"], name


def test_registration_over_its_rate_is_readable_with_its_retry_after(client: Client, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_REGISTRATION_BURST": 1}
    body = {"client_name": "x", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
    client.post("/oauth/register/", data=body, content_type="application/json", headers={"Origin": PAGE})
    refused = client.post("/oauth/register/", data=body, content_type="application/json", headers={"Origin": PAGE})
    assert refused.status_code == 429
    assert refused["Access-Control-Allow-Origin"] == "*"
    assert "Retry-After" in refused["Access-Control-Expose-Headers"]


def test_pages_a_person_navigates_to_get_no_cors(client: Client) -> None:
    for path in ("/oauth/authorize/", "/oauth/login/"):
        reply = client.get(path, headers={"Origin": PAGE})
        assert "Access-Control-Allow-Origin" not in reply, path
