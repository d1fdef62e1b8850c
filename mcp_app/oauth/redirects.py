"""Which redirect URI schemes a client may register and be redirected to (RFC 8252, native apps): ``http``,
``https`` and the private-use schemes of its own redirect URIs, unless refused (``NEVER``,
``MCP_APP["OAUTH_DENIED_REDIRECT_SCHEMES"]``). One refused URI refuses the whole registration.

Design: docs/oauth.md ("Redirect schemes"). Not here: the loopback rule for plain ``http``
(``validator.McpOAuth2Validator.validate_redirect_uri``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from oauth2_provider.models import AbstractApplication, get_application_model

from ..conf import mcp_settings

WEB_SCHEMES = ("http", "https")
# Schemes the browser handles itself: a redirect there would run or read something in the browser, never reach
# a native app. Refused whatever the settings say.
NEVER = frozenset({"javascript", "data", "file", "blob", "about", "vbscript", "filesystem", "view-source"})
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")  # RFC 3986 §3.1, lower-cased


def _get_allowed_schemes(application: Any) -> list[str]:
    """The schemes a client may use: the web ones, and the private-use ones of its redirect URIs not refused."""
    denied = NEVER | {name.lower() for name in mcp_settings.OAUTH_DENIED_REDIRECT_SCHEMES}
    schemes = list(WEB_SCHEMES)
    for uri in (application.redirect_uris or "").split():
        scheme = urlsplit(uri).scheme.lower()
        if scheme not in schemes and scheme not in denied and _SCHEME.fullmatch(scheme):
            schemes.append(scheme)
    return schemes


def install() -> None:
    """Answer DOT's ``get_allowed_schemes`` (its documented place to widen schemes) per client, on DOT's own
    model (``AppConfig.ready``); a project whose own model defines the method keeps its own."""
    application = get_application_model()
    if application.get_allowed_schemes is AbstractApplication.get_allowed_schemes:
        application.get_allowed_schemes = _get_allowed_schemes
