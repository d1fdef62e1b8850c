"""Request hygiene checks that precede authentication and dispatch: Host, Origin, media types.

Each function answers a yes/no question about headers; the consumer turns a "no" into a status code.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from ..conf import mcp_settings


def host_allowed(host: str | None) -> bool:
    """DNS-rebinding protection: the Host header must match Django's ``ALLOWED_HOSTS``."""
    if host is None:
        return True  # HTTP/1.0 and in-process test clients send no Host; browsers always do.
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


def origin_allowed(origin: str | None, server_origins: Iterable[str]) -> bool:
    """A request without Origin (not from a browser) passes; a browser's Origin must be listed."""
    if origin is None:
        return True
    origin = origin.rstrip("/")
    return origin in set(server_origins) or origin in set(mcp_settings.ALLOWED_ORIGINS)


def is_json_content_type(content_type: str | None) -> bool:
    """POST bodies must be JSON. Refusing form and text types also blocks cross-site "simple" requests."""
    if content_type is None:
        return True
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json"


def accepts(accept: str | None, media_type: str) -> bool:
    """Whether an Accept header admits ``media_type`` (a missing header admits anything)."""
    if accept is None:
        return True
    major = media_type.split("/", 1)[0]
    for part in accept.split(","):
        candidate = part.split(";", 1)[0].strip().lower()
        if candidate in (media_type, f"{major}/*", "*/*"):
            return True
    return False
