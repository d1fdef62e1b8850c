"""OAuth test helpers and fixtures: the authorization server driven with Django's test client, the MCP edge with the real consumer.

``oauth`` runs the whole authorization-code + PKCE flow in process (dynamic registration, sign-in, consent,
token) and returns the issued tokens; tests then call ``/mcp/<server_id>`` with the access token, no agentId.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client

ORIGIN = "http://testserver"
REDIRECT = "http://127.0.0.1:33333/callback"


# Registration bodies (RFC 7591) as the clients send them: redirect URIs, public clients (no secret), the
# authorization code grant with refresh tokens. The first redirect URI is the one each test signs in with.
NATIVE_CLIENT_REGISTRATIONS: dict[str, dict[str, Any]] = {
    "cursor": {
        "client_name": "Cursor",
        "redirect_uris": ["cursor://anysphere.cursor-retrieval/oauth/user-demo/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "vscode": {
        "client_name": "Visual Studio Code",
        "client_uri": "https://code.visualstudio.com/",
        "redirect_uris": [
            "http://127.0.0.1:33418/",
            "https://vscode.dev/redirect",
            "https://insiders.vscode.dev/redirect",
            "http://localhost:33418/",
        ],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "claude-code": {
        "client_name": "Claude Code (demo)",
        "redirect_uris": ["http://localhost:54212/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    },
    "inspector": {
        "client_name": "MCP Inspector",
        "client_uri": "https://github.com/modelcontextprotocol/inspector",
        "redirect_uris": ["http://localhost:6274/oauth/callback", "http://localhost:6274/oauth/callback/debug"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": "mcp",
    },
}


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(
    client: Client,
    redirect_uris: list[str] | None = None,
    name: str = "Test client",
    *,
    auth_method: str = "none",
    **stated: Any,
) -> dict[str, Any]:
    """Dynamic registration (RFC 7591); ``auth_method`` other than ``none`` makes the client confidential (with a
    secret); ``stated`` adds what the client says about itself (``client_uri``, ``logo_uri``)."""
    response = client.post(
        "/oauth/register/",
        data={
            "client_name": name,
            "redirect_uris": redirect_uris or [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": auth_method,
            **stated,
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def authorize_params(client_id: str, server_id: str, challenge: str, **extra: Any) -> dict[str, Any]:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st4te",
        "scope": "mcp",
        "resource": f"{ORIGIN}/mcp/{server_id}",
    }
    params.update(extra)
    return {key: value for key, value in params.items() if value is not None}


def redirect_query(response: Any) -> dict[str, str]:
    assert response.status_code == 302, (response.status_code, response.content[:500])
    location = response["Location"]
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


@dataclass
class Issued:
    client_id: str
    access_token: str
    refresh_token: str
    server: Any
    user: Any
    raw: dict[str, Any] = field(default_factory=dict)
    client_secret: str = ""  # a confidential client's (``run_flow(auth_method=...)``)

    # The transport helpers' "access" protocol: no agentId in the URL.
    @property
    def raw_token(self) -> str:
        return self.access_token

    @property
    def path(self) -> str:
        return f"/mcp/{self.server.server_id}"

    query = ""


def token_request(client: Client, **data: Any) -> Any:
    return client.post(
        "/oauth/token/",
        data=urlencode({k: v for k, v in data.items() if v is not None}, doseq=True),
        content_type="application/x-www-form-urlencoded",
    )


def refresh(client: Client, issued: Issued, **fields: Any) -> Any:
    """The token endpoint's answer to refreshing ``issued`` (its refresh token, client and server's resource);
    ``fields`` send something else instead, or (``None``) leave a field out."""
    sent = {
        "grant_type": "refresh_token",
        "refresh_token": issued.refresh_token,
        "client_id": issued.client_id,
        "resource": f"{ORIGIN}/mcp/{issued.server.server_id}",
        **fields,
    }
    return token_request(client, **sent)


def authorize(client: Client, user: Any, server: Any, **extra: Any) -> Any:
    """A newly registered client's authorization request for ``server``, made by ``user`` (signed in here);
    ``extra`` changes or (``None``) leaves out its parameters."""
    registered = register(client)
    client.force_login(user)
    return client.get(
        "/oauth/authorize/", authorize_params(registered["client_id"], server.server_id, pkce()[1], **extra)
    )


def consent_form(client: Client, user: Any, server: Any) -> tuple[dict[str, Any], str]:
    """The consent page of ``authorize``: its form fields as the browser would post them back (no button
    pressed), and the PKCE verifier."""
    verifier, challenge = pkce()
    page = authorize(client, user, server, code_challenge=challenge)
    assert page.status_code == 200, page.content[:500]
    return {k: v for k, v in page.context["form"].initial.items() if v is not None}, verifier


def run_flow(
    client: Client, user: Any, server: Any, *, grant: dict[str, Any] | None = None, auth_method: str = "none"
) -> Issued:
    registered = register(client, auth_method=auth_method)
    client.force_login(user)
    verifier, challenge = pkce()
    params = authorize_params(registered["client_id"], server.server_id, challenge)
    page = client.get("/oauth/authorize/", params)
    assert page.status_code == 200, page.content[:800]
    form = dict(page.context["form"].initial)
    form.update({"allow": "Authorize", "grant": "all"})
    form.update(grant or {})
    done = client.post("/oauth/authorize/", {k: v for k, v in form.items() if v is not None})
    query = redirect_query(done)
    assert query["iss"] == ORIGIN
    token = token_request(
        client,
        grant_type="authorization_code",
        code=query["code"],
        redirect_uri=REDIRECT,
        client_id=registered["client_id"],
        client_secret=registered.get("client_secret"),
        code_verifier=verifier,
        resource=f"{ORIGIN}/mcp/{server.server_id}",
    )
    assert token.status_code == 200, token.content
    body = token.json()
    secret = registered.get("client_secret", "")
    return Issued(registered["client_id"], body["access_token"], body["refresh_token"], server, user, body, secret)


def delete_client(issued: Issued) -> None:
    """Delete ``issued``'s OAuth client, the way the admin does."""
    from oauth2_provider.models import Application

    Application.objects.get(client_id=issued.client_id).delete()


def forget_registrations(address: str = "127.0.0.1") -> None:
    """Empty the registration bucket of ``address``: this process's, and the shared one in Redis (which the
    daphne processes of the end-to-end tests use)."""
    from django.conf import settings

    from mcp_app.backends import backends
    from mcp_app.limits import rates
    from mcp_app.oauth.views import registration_bucket

    bucket = registration_bucket(address)
    if bucket is None:
        return
    backends.set(rates.RATE_LIMITS, None)  # a local backend's buckets go with it
    if settings.REDIS_URL:
        import redis

        with redis.Redis.from_url(settings.REDIS_URL) as client:
            client.delete(f"{rates.KEY_PREFIX}:{bucket.key}")


@pytest.fixture(autouse=True)
def _registrations_not_counted() -> Any:
    """Registrations of earlier tests (same address) do not count against this one's."""
    forget_registrations()
    yield
    forget_registrations()


@pytest.fixture
def oauth_world(transactional_db: Any, access_factory: Callable[..., Any], member_factory: Callable[..., Any]) -> Any:
    """A server with the demo tools, and a person who is a member of its tenant."""
    access = access_factory()
    user = member_factory((access.tenant, "viewer"), is_staff=False)
    return access, user


@pytest.fixture
def oauth(oauth_world: Any) -> Issued:
    access, user = oauth_world
    return run_flow(Client(), user, access.server)
