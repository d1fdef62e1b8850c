"""Protected resources: an MCP server's canonical URL (``<origin>/mcp/<server_id>``, no query, no trailing slash)
and where its RFC 9728 metadata lives. The edge (``mcp_app.transport``) names the metadata URL in its
challenges; the authorization server maps a ``resource`` parameter back to a server."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.http import HttpRequest

METADATA_PREFIX = "/.well-known/oauth-protected-resource"
_PATH = re.compile(r"^/mcp/(?P<server_id>[-a-zA-Z0-9_]+)$")


def resource_url(origin: str, server_id: str) -> str:
    return f"{origin}/mcp/{server_id}"


def metadata_url(origin: str, server_id: str) -> str:
    return f"{origin}{METADATA_PREFIX}/mcp/{server_id}"


def server_id_of(resource: str, origin: str) -> str | None:
    """The server id a ``resource`` indicator names on this origin, or ``None`` (anything but the exact URL)."""
    try:
        parts = urlsplit(resource)
    except ValueError:
        return None
    if parts.query or parts.fragment or f"{parts.scheme}://{parts.netloc}".lower() != origin.lower():
        return None
    found = _PATH.match(parts.path)
    return found["server_id"] if found else None


def origin_of(request: HttpRequest) -> str:
    """The request's origin (``scheme://host[:port]``); the host is checked against ``ALLOWED_HOSTS``."""
    return f"{request.scheme}://{request.get_host()}"
