"""``GET /``: what this deployment serves and where, for a person or a probe that lands on the root."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from mcp_app import PRODUCT_NAME, __version__


def index(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            "name": PRODUCT_NAME,
            "version": __version__,
            "mcp": "/mcp/<server_id>?agentId=<agent_id>",
            "admin": "/admin/",
            "health": "/healthz",
            "readiness": "/readyz",
        }
    )
