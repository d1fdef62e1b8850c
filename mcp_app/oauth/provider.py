"""The ``OAUTH2_PROVIDER`` settings mcp-host runs DOT with (``OAUTH2_PROVIDER = provider_settings()``): code + PKCE
S256 only, refresh rotation, digests, ``iss``, client ID metadata documents and open registration; lifetimes are
arguments.
"""

from __future__ import annotations

from typing import Any

SCOPE = "mcp"


def provider_settings(
    *,
    access_token_seconds: int = 3600,
    refresh_token_seconds: int = 30 * 86400,
    authorization_code_seconds: int = 60,
    **overrides: Any,
) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "OAUTH2_VALIDATOR_CLASS": "mcp_app.oauth.validator.McpOAuth2Validator",
        "ACCESS_TOKEN_GENERATOR": "mcp_app.oauth.validator.access_token",
        "SCOPES": {SCOPE: "Use MCP servers"},
        "DEFAULT_SCOPES": [SCOPE],
        "ACCESS_TOKEN_EXPIRE_SECONDS": access_token_seconds,
        "REFRESH_TOKEN_EXPIRE_SECONDS": refresh_token_seconds,
        "AUTHORIZATION_CODE_EXPIRE_SECONDS": authorization_code_seconds,
        "ROTATE_REFRESH_TOKEN": True,
        "REFRESH_TOKEN_REUSE_PROTECTION": True,
        "PKCE_REQUIRED": True,
        "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
        "ALLOW_LOCALHOST_LOOPBACK": True,  # RFC 8252: native clients listen on a loopback port of their choice
        "REQUEST_APPROVAL_PROMPT": "force",
        "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
        "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
        "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
        "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
        "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
        "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
        "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
        "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
        "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
        "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
        "COMPLIANT_BCP_RFC9700_REDIRECT_URI_MATCHING": True,
        "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
        "DCR_ENABLED": True,
        "DCR_REGISTRATION_PERMISSION_CLASSES": ("mcp_app.oauth.views.OpenRegistration",),
        "CIMD_ENABLED": True,
        "CIMD_METADATA_FETCHER": "mcp_app.oauth.cimd.NetguardMetadataFetcher",
        "CIMD_FETCH_TIMEOUT_SECONDS": 5,
        "CIMD_MAX_DOCUMENT_SIZE": 16 * 1024,
        # Bounded per host instead, over one deadline (mcp_app.oauth.cimd, MCP_APP["OAUTH_CIMD_FETCHES_PER_HOST"]):
        # a global cap lets ten slow documents of one host refuse every other client's.
        "CIMD_MAX_CONCURRENT_FETCHES": 0,
        "OAUTH2_PROTECTED_RESOURCE_NAME": "mcp-host",
    }
    settings.update(overrides)
    return settings
