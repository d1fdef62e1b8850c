"""CORS of the authorization server's public endpoints (metadata, registration, token, revocation), for clients
that run in a browser page: every origin, never credentials (docs/oauth.md, "Clients in a browser page"). A view
that meets an unavailable database answers ``mcp_app.database.middleware``'s 503 here, with these headers.

Not here: the pages the browser navigates to, and the MCP endpoint (``mcp_app.transport.cors``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from ..conf import mcp_settings
from ..database import DATABASE_ERRORS
from ..database.middleware import unavailable

ALLOWED_REQUEST_HEADERS = "Authorization, Content-Type, Accept, MCP-Protocol-Version"
EXPOSED = "WWW-Authenticate, Retry-After"


def public(view: Callable[..., HttpResponse], methods: str) -> Callable[..., HttpResponse]:
    """``view`` open to every origin (docs/oauth.md); ``methods`` as its preflight names them."""

    @functools.wraps(view)
    def cross_origin(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "OPTIONS" and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in request.META:
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = f"{methods}, OPTIONS"
            response["Access-Control-Allow-Headers"] = ALLOWED_REQUEST_HEADERS
            response["Access-Control-Max-Age"] = str(mcp_settings.CORS_MAX_AGE_SECONDS)
        else:
            try:
                response = view(request, *args, **kwargs)
            except DATABASE_ERRORS as exc:
                response = unavailable(request, exc)
            response["Access-Control-Expose-Headers"] = EXPOSED
        response["Access-Control-Allow-Origin"] = "*"
        return response

    return cross_origin
