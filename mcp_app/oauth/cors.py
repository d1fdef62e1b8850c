"""CORS of the authorization server's public endpoints, for clients that run in a browser page (the MCP
Inspector, web agents): the RFC 8414 and RFC 9728 metadata, dynamic registration, token and revocation.

They need no cookie and trust no origin (a client proves itself with PKCE, its secret or its token), so every
origin may call them: ``Access-Control-Allow-Origin: *``, never ``Access-Control-Allow-Credentials``, with
``WWW-Authenticate`` and ``Retry-After`` exposed. A preflight (``OPTIONS`` with
``Access-Control-Request-Method``) gets 204 with the endpoint's methods, the request headers such clients send
(``Authorization``, ``Content-Type``, ``Accept``, ``MCP-Protocol-Version``) and ``CORS_MAX_AGE_SECONDS``. A view
that meets an unavailable database answers ``mcp_app.database.middleware``'s 503 here, with these headers.

Not here: the authorization, sign-in and consent pages (the browser navigates to them, with cookies and CSRF
tokens; they never answer a fetch), and the MCP endpoint, whose origins each server lists
(``mcp_app.transport.cors``).
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
    """``view`` open to every origin (see the module docstring); ``methods`` as its preflight names them."""

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
