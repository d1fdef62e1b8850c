"""Native and desktop clients at the authorization server, registering as they really do (RFC 8252): Cursor's
private-use scheme, VS Code's loopback and vscode.dev redirects, Claude Code's and the Inspector's localhost
ports; each registers, signs in, is redirected to exactly its URI and gets a token. Schemes a browser would run
or read are refused, and so is the whole registration that names one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.oauth_flow import (
    NATIVE_CLIENT_REGISTRATIONS,
    ORIGIN,
    authorize_params,
    pkce,
    token_request,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _register(client: Client, body: dict[str, Any]) -> Any:
    return client.post("/oauth/register/", data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize("name", sorted(NATIVE_CLIENT_REGISTRATIONS))
def test_a_native_client_registers_signs_in_and_gets_a_token(client: Client, oauth_world: Any, name: str) -> None:
    access, user = oauth_world
    body = NATIVE_CLIENT_REGISTRATIONS[name]
    registered = _register(client, body)
    assert registered.status_code == 201, registered.content
    assert registered.json()["redirect_uris"] == body["redirect_uris"]
    redirect_uri = body["redirect_uris"][0]
    client_id = registered.json()["client_id"]

    client.force_login(user)
    verifier, challenge = pkce()
    params = authorize_params(client_id, access.server.server_id, challenge, redirect_uri=redirect_uri)
    page = client.get("/oauth/authorize/", params)
    assert page.status_code == 200, page.content[:500]
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    done = client.post("/oauth/authorize/", {**form, "allow": "Authorize", "grant": "all"})
    assert done.status_code == 302, done.content[:500]
    location = done["Location"]
    assert location.startswith(redirect_uri + "?"), location  # exactly the registered URI
    query = dict(pair.split("=", 1) for pair in location.split("?", 1)[1].split("&"))
    token = token_request(
        client,
        grant_type="authorization_code",
        code=query["code"],
        redirect_uri=redirect_uri,
        client_id=client_id,
        code_verifier=verifier,
        resource=f"{ORIGIN}/mcp/{access.server.server_id}",
    )
    assert token.status_code == 200, token.content
    assert token.json()["access_token"].startswith("mcp_")


def test_a_private_use_redirect_matches_exactly(client: Client, oauth_world: Any) -> None:
    access, user = oauth_world
    registered = _register(client, NATIVE_CLIENT_REGISTRATIONS["cursor"]).json()
    client.force_login(user)
    for other in (
        "cursor://anysphere.cursor-retrieval/oauth/user-other/callback",
        "cursor://evil.example/oauth/user-demo/callback",
        "cursorx://anysphere.cursor-retrieval/oauth/user-demo/callback",
    ):
        params = authorize_params(registered["client_id"], access.server.server_id, pkce()[1], redirect_uri=other)
        response = client.get("/oauth/authorize/", params)
        assert response.status_code == 400, other
        assert "Location" not in response


@pytest.mark.parametrize(
    "uri",
    [
        "javascript:alert(1)//",
        "javascript://example.com/%0Aalert(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "blob:https://example.com/1",
        "vbscript:msgbox",
        "ws://127.0.0.1:9/callback",  # on the default deny list
        "1bad://callback",  # not a scheme (RFC 3986 starts with a letter)
    ],
)
def test_schemes_a_browser_runs_or_reads_refuse_the_registration(client: Client, uri: str) -> None:
    body = {**NATIVE_CLIENT_REGISTRATIONS["cursor"]}
    body["redirect_uris"] = [*body["redirect_uris"], uri]  # one bad URI refuses the whole registration
    response = _register(client, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")


def test_the_operator_deny_list_refuses_a_private_use_scheme(client: Client, settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "OAUTH_DENIED_REDIRECT_SCHEMES": ["cursor"]}
    response = _register(client, NATIVE_CLIENT_REGISTRATIONS["cursor"])
    assert response.status_code == 400
