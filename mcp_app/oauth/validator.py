"""DOT's request validator, extended with what an MCP authorization server must add (``OAUTH2_VALIDATOR_CLASS``):
the RFC 8707 ``resource`` naming exactly one consented, OAuth-enabled server the user may still use; each access
token mirrored as an agent token; single-use codes. Design: docs/oauth.md ("How mcp_app.oauth is built").
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

from django.core.cache import cache
from django.db import router, transaction
from django.http import HttpRequest
from oauth2_provider.models import get_access_token_model, get_grant_model, get_refresh_token_model
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.settings import oauth2_settings
from oauthlib.oauth2.rfc6749 import errors

from ..models import AgentToken, McpServer, OAuthConsent
from ..models.credentials import PREFIX_HEX_CHARS, credential_digest
from ..models.oauth import may_consent
from .resources import server_id_of


def access_token(request: Any, refresh_token: bool = False) -> str:
    """DOT's ``ACCESS_TOKEN_GENERATOR``: an agent-token-shaped value (``mcp_<prefix>_<secret>``)."""
    return AgentToken.objects.mint()[0]


def _origin(request: Any) -> str:
    http = HttpRequest()
    http.META = dict(request.headers)
    http.META.setdefault("SERVER_NAME", "localhost")
    http.META.setdefault("SERVER_PORT", "80")
    secure = bool(request.headers.get("X_DJANGO_OAUTH_TOOLKIT_SECURE"))
    return f"{'https' if secure else 'http'}://{http.get_host()}"


def target_server(resources: list[str], origin: str) -> McpServer | None:
    """The one servable, OAuth-enabled server the ``resource`` indicators name, or ``None``."""
    if len(resources) != 1:
        return None
    server_id = server_id_of(resources[0], origin)
    if server_id is None:
        return None
    return McpServer.objects.servable().filter(server_id=server_id, oauth_enabled=True).select_related("tenant").first()


def redeemed_code_key(code: str) -> str:
    """The cache key remembering which token family an authorization code started."""
    return f"mcp-oauth-code:{hashlib.sha256(code.encode()).hexdigest()}"


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class McpOAuth2Validator(OAuth2Validator):
    def validate_redirect_uri(self, client_id: str, redirect_uri: str, request: Any, *args: Any, **kwargs: Any) -> bool:
        """DOT's exact matching (loopback: any port, RFC 8252), and plain ``http`` only for loopback hosts: the
        reason ``http`` is among ``ALLOWED_REDIRECT_URI_SCHEMES`` (native clients listen on loopback)."""
        parts = urlsplit(redirect_uri)
        if parts.scheme == "http" and (parts.hostname or "") not in LOOPBACK_HOSTS:
            return False
        return bool(super().validate_redirect_uri(client_id, redirect_uri, request, *args, **kwargs))

    def validate_refresh_token(self, refresh_token: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        """DOT's checks, and the access token it was issued with must not have been revoked as an agent token
        (the admin's or the API's revoke action on the mirror): revoking it ends the whole grant."""
        if not super().validate_refresh_token(refresh_token, client, request, *args, **kwargs):
            return False
        previous = getattr(request, "refresh_token_instance", None)
        access = getattr(previous, "access_token", None)
        if access is not None and access.token_checksum:
            revoked = AgentToken.objects.filter(digest=access.token_checksum, revoked_at__isnull=False)
            if revoked.exists():
                return False
        return True

    def validate_code(self, client_id: str, code: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        """DOT's check, the grant row locked first; a code exchanged again revokes its first exchange's tokens."""
        grants = get_grant_model().objects
        if transaction.get_connection(router.db_for_write(grants.model)).in_atomic_block:
            list(grants.select_for_update().filter(code=code, application=client).values_list("pk"))
        if super().validate_code(client_id, code, client, request, *args, **kwargs):
            return True
        family = cache.get(redeemed_code_key(code))
        if family is not None:
            cache.delete(redeemed_code_key(code))
            get_refresh_token_model().revoke_family(family)  # deletes the access tokens: their mirrors follow
        return False

    def save_bearer_token(self, token: dict[str, Any], request: Any, *args: Any, **kwargs: Any) -> Any:
        """DOT's save (oauthlib's public hook), in one transaction with what an MCP server adds for the code and
        refresh grants: the ``resource`` required and checked (``consent_for``), the access token mirrored as an
        agent token of the consent, and the code's token family remembered (docs/oauth.md). DOT has
        normalised ``request.resource`` by then (a repeated parameter, a value inherited from the grant)."""
        mirrored = request.grant_type in ("authorization_code", "refresh_token")
        if mirrored and not getattr(request, "resource", None):
            raise errors.CustomOAuth2Error(
                error="invalid_target",
                description="The resource parameter (RFC 8707) is required: the MCP server's URL.",
                request=request,
            )
        with transaction.atomic(using=router.db_for_write(get_access_token_model())):
            saved = super().save_bearer_token(token, request, *args, **kwargs)
            if not mirrored:
                return saved
            consent = consent_for(request)
            raw = token["access_token"]
            digest = credential_digest(raw)
            issued = (
                get_access_token_model()
                .objects.filter(token_checksum=digest)
                .values("expires", "refresh_token__token_family")
                .first()
            )
            if issued is not None:  # else DOT handed back a token it had issued (and we mirrored) before
                consent.issue_token(digest, raw.split("_")[1][:PREFIX_HEX_CHARS], issued["expires"])
                if request.grant_type == "authorization_code":
                    timeout = oauth2_settings.REFRESH_TOKEN_EXPIRE_SECONDS
                    cache.set(redeemed_code_key(request.code), issued["refresh_token__token_family"], timeout=timeout)
        return saved


def consent_for(request: Any) -> OAuthConsent:
    """The consent the token request's one ``resource`` names, its user still eligible; else an OAuth error."""
    server = target_server(list(request.resource), _origin(request))
    if server is None:
        raise errors.CustomOAuth2Error(
            error="invalid_target",
            description="The resource must be the URL of exactly one MCP server of this site.",
            request=request,
        )
    user = request.user
    consent = (
        OAuthConsent.objects.filter(user=user, application=request.client, server=server)
        .select_related("agent", "application", "server")
        .first()
        if user is not None and user.is_active
        else None
    )
    if consent is None or not consent.agent.is_active:
        raise errors.InvalidGrantError(description="No consent for this client on this server.", request=request)
    if not may_consent(user, server):
        raise errors.InvalidGrantError(
            description="This account may no longer use this MCP server (membership, role or the server's "
            "consent setting changed).",
            request=request,
        )
    return consent
