"""Request hygiene checks that precede authentication and dispatch: Host, Origin, media types.

Each function answers a question about headers; the consumer turns a "no" into a status code. Only the
canonical form of an ``Origin`` (RFC 6454: ``scheme://host[:port]``) is ever compared or echoed; a same-origin
request is accepted without being listed, since the Host check already stops DNS rebinding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http.request import split_domain_port, validate_host

from ..conf import mcp_settings


def request_headers(scope: dict[str, Any]) -> dict[str, str]:
    """Request headers by lower-case name; of repeated headers the first counts."""
    headers: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return headers


def request_origin(scope: dict[str, Any], headers: dict[str, str]) -> str:
    """This request's origin as clients see it (the proxy's scheme header counts, as in Django); the Host
    header was checked against ``ALLOWED_HOSTS`` already."""
    scheme = scope.get("scheme") or "http"
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy and headers.get(proxy[0].removeprefix("HTTP_").replace("_", "-").lower()) == proxy[1]:
        scheme = "https"
    return f"{scheme}://{headers.get('host') or 'localhost'}"


# The answers of ``host_allowed`` and ``accepts`` for the header values seen lately (clients send the same ones on
# every request): bounded, forgotten at once when full and when Django's settings change.
_KEPT = 1024
_hosts: dict[str, bool] = {}
_accepted: dict[tuple[str, str], bool] = {}


@receiver(setting_changed)
def _forget_answers(**kwargs: Any) -> None:
    _hosts.clear()  # ALLOWED_HOSTS or DEBUG may have changed


def host_allowed(host: str | None) -> bool:
    """DNS-rebinding protection: the Host header must match Django's ``ALLOWED_HOSTS``."""
    if host is None:
        return True  # HTTP/1.0 and in-process test clients send no Host; browsers always do.
    allowed = _hosts.get(host)
    if allowed is None:
        if len(_hosts) >= _KEPT:
            _hosts.clear()
        allowed = _hosts[host] = _host_allowed(host)
    return allowed


def _host_allowed(host: str) -> bool:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_origin(origin: str) -> str | None:
    """The serialized origin ``scheme://host[:port]`` (lower case, default port left out) that ``origin``
    spells, or ``None`` when it is not one: a path (even ``/``), a query, a fragment, user info, a scheme other
    than http(s), ``null``."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.fragment:
        return None
    if "@" in parts.netloc or origin.strip().endswith(("?", "#")):
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" if port is None or port == DEFAULT_PORTS[scheme] else f"{scheme}://{host}:{port}"


def listed_origins(origins: Iterable[str]) -> set[str]:
    """A list of allowed origins (a server's, ``ALLOWED_ORIGINS``) in canonical form; unreadable entries drop."""
    return {canonical for origin in origins if (canonical := canonical_origin(str(origin).rstrip("/")))}


def same_origin(origin: str, host: str | None) -> bool:
    """Whether the canonical ``origin`` names ``host`` (the request's Host header), whatever the scheme: TLS
    usually ends at a proxy, so the scheme this process sees says nothing of the browser's."""
    if host is None:
        return False
    scheme, _, authority = origin.partition("://")
    expected = canonical_origin(f"{scheme}://{host.strip()}")
    return expected is not None and expected.partition("://")[2] == authority


def origin_allowed(origin: str | None, server_origins: Iterable[str], host: str | None = None) -> bool:
    """A request without Origin (not from a browser) passes; a browser's Origin must be a real origin, and
    either the request's own (same-origin) or listed by the server or ``ALLOWED_ORIGINS``."""
    if origin is None:
        return True
    canonical = canonical_origin(origin)
    return canonical is not None and (same_origin(canonical, host) or origin_listed(canonical, server_origins))


def origin_listed(origin: str, server_origins: Iterable[str]) -> bool:
    """Whether ``origin`` (already canonical, see ``canonical_origin``) is listed by the server or by
    ``ALLOWED_ORIGINS``."""
    return origin in listed_origins(server_origins) or origin in listed_origins(mcp_settings.ALLOWED_ORIGINS)


def is_json_content_type(content_type: str | None) -> bool:
    """POST bodies must be JSON. Refusing form and text types also blocks cross-site "simple" requests."""
    return content_type is None or content_type.split(";", 1)[0].strip().lower() == "application/json"


def accepts(accept: str | None, media_type: str) -> bool:
    """Whether an Accept header admits ``media_type`` (a missing header admits anything)."""
    if accept is None:
        return True
    answer = _accepted.get((accept, media_type))
    if answer is None:
        if len(_accepted) >= _KEPT:
            _accepted.clear()
        answer = _accepted[accept, media_type] = _accepts(accept, media_type)
    return answer


def _accepts(accept: str, media_type: str) -> bool:
    admitting = (media_type, f"{media_type.split('/', 1)[0]}/*", "*/*")
    return any(part.split(";", 1)[0].strip().lower() in admitting for part in accept.split(","))
