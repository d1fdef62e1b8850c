"""``DatabaseUnavailableMiddleware``: a Django view that fails because the database is unavailable answers 503
with ``Retry-After`` and ``Cache-Control: no-store``, not 500 with a traceback (docs/deployment.md).

JSON ``{"error": "temporarily_unavailable", ...}`` (RFC 6749 §5.2) for the authorization server's machine endpoints
and requests that do not accept HTML, else a short page; one warning line, no traceback. Add it anywhere in
``MIDDLEWARE``. Not covered: an exception raised by another middleware outside the view (e.g. a session saved at
the response) is still Django's 500; the MCP endpoint and the REST API answer their own 503s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from . import DATABASE_ERRORS, RETRY_AFTER_SECONDS

logger = logging.getLogger("mcp_app.database")

OAUTH_NAMESPACE = "oauth2_provider"
# DOT's endpoints that clients (not people) call: their errors are JSON (RFC 6749 §5.2, RFC 7591 §3.2.2).
JSON_ENDPOINTS = frozenset(
    {
        "token",
        "revoke-token",
        "dcr-register",
        "dcr-register-management",
        "oauth-server-metadata",
        "oauth-resource-metadata",
    }
)
DESCRIPTION = "The database is unavailable; retry after Retry-After seconds."
PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>Temporarily unavailable</title></head>"
    "<body><h1>Temporarily unavailable</h1><p>The service cannot reach its database. Please try again in a "
    "moment.</p></body></html>"
)


def oauth_endpoint(request: HttpRequest) -> str | None:
    """The name of the authorization server's endpoint ``request`` reached, if it did."""
    match = request.resolver_match
    return match.url_name if match is not None and OAUTH_NAMESPACE in match.namespaces else None


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return unavailable(request, exception) if isinstance(exception, DATABASE_ERRORS) else None


def unavailable(request: HttpRequest, exception: BaseException) -> HttpResponse:
    """The 503 answering ``request``, whose view met ``exception`` (one of ``DATABASE_ERRORS``), logged."""
    logger.warning("%s %s: 503, the database is unavailable (%s)", request.method, request.path, exception)
    if oauth_endpoint(request) in JSON_ENDPOINTS or not request.accepts("text/html"):
        body = {"error": "temporarily_unavailable", "error_description": DESCRIPTION}
        response = HttpResponse(json.dumps(body), status=503, content_type="application/json")
    else:
        response = HttpResponse(PAGE, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response
