"""How humans authenticate to the API: a personal API key (``Authorization: Bearer mcpk_…``) or the Django
session (CSRF on unsafe methods). An agent token is a 401 that says so; an unknown, revoked, expired or inactive
user's key is a 401 with one message, so the answer does not tell which (docs/api.md, "Authentication").
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from ..conf import mcp_settings
from ..models.apikeys import ApiKey, looks_like_api_key

BEARER = "Bearer"
INVALID_KEY = "Invalid, revoked or expired API key."
NOT_AN_API_KEY = "Agent tokens cannot be used with the API; use a personal API key (mcpk_…)."


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer mcpk_<prefix>_<secret>``; the request acts as the key's user."""

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        scheme, _, raw = header.decode("latin-1").partition(" ")
        if scheme.lower() != BEARER.lower():
            return None
        raw = raw.strip()
        if not raw or " " in raw:
            raise exceptions.AuthenticationFailed(INVALID_KEY)
        if not looks_like_api_key(raw):
            raise exceptions.AuthenticationFailed(NOT_AN_API_KEY if raw.startswith("mcp_") else INVALID_KEY)
        key = ApiKey.objects.authenticate(raw)
        if key is None:
            raise exceptions.AuthenticationFailed(INVALID_KEY)
        key.touch(mcp_settings.TOKEN_LAST_USED_INTERVAL_SECONDS)
        return key.user, key

    def authenticate_header(self, request: Request) -> str:
        return f'{BEARER} realm="api"'


# The logged-in Django session; unsafe methods need the CSRF token (``X-CSRFToken``). DRF's own class, so that
# drf-spectacular documents it as the session cookie scheme.
SessionAuthentication = authentication.SessionAuthentication


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):  # the key scheme, in the OpenAPI schema
    target_class = "mcp_app.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "mcpk_<prefix>_<secret> (a personal API key)",
            "description": "A personal API key, issued once in the admin (API keys) or by POST /api/v1/api-keys/.",
        }
