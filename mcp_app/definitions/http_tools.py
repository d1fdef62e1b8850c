"""Configuration rules of http tools, and the write-only handling of their secret headers for front doors.

``validate_url``, ``validate_headers`` and ``validate_timeout`` raise ``ValueError`` with a sentence for the user
(the URL and timeout rules serve upstreams too, by ``kind``); ``parse_secret_headers`` reads what a form or API
client typed. Only ``open_secret_headers`` decrypts stored secrets (the runtime, when it sends a request).
See docs/http-tools.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..conf import mcp_settings
from ..crypto import InvalidToken, decrypt
from ..netguard import parse_address, refusal
from ..outbound import OutboundKind, allowed_networks

SECRET_PLACEHOLDER = "set"  # noqa: S105  (what is shown instead of a secret)
MAX_HEADERS = 50
MAX_HEADER_VALUE = 8192
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
# Headers the runtime owns: framing, the connection, the host, and what it asks the server to send.
RESERVED_HEADERS = frozenset(
    {
        "accept-encoding",
        "connection",
        "content-length",
        "content-type",
        "expect",
        "host",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class SecretHeadersUnavailable(Exception):
    """The stored secret headers cannot be decrypted with any configured key (keys rotated away, or tampered)."""


# Who makes each kind of outbound connection, in messages ("… http tools may not call it").
SUBJECTS: dict[OutboundKind, str] = {"http_tool": "http tools", "upstream": "upstreams", "cimd": "client metadata"}


def validate_url(url: str, *, kind: OutboundKind = "http_tool") -> None:
    """The rules of every outbound URL (http tools, upstreams): http(s), no credentials, a host, no fragment, and
    a literal address the SSRF guard accepts for ``kind`` (``outbound.allowed_networks``)."""
    if not isinstance(url, str) or not url:
        raise ValueError("Give the URL to call.")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ValueError("The URL must not contain spaces or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"Not a valid URL: {exc}.") from exc
    if parts.scheme not in ("http", "https"):
        raise ValueError("The URL must start with http:// or https://.")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise ValueError("The URL must not contain credentials (user:password@); use a secret header instead.")
    if not parts.hostname:
        raise ValueError("The URL needs a host.")
    if parts.fragment:
        raise ValueError("The URL must not have a #fragment.")
    try:
        address = parse_address(parts.hostname)
    except ValueError:
        return
    allow = allowed_networks(kind)
    reason = refusal(address, port or (443 if parts.scheme == "https" else 80), parts.hostname, allow)
    if reason is not None:
        raise ValueError(f"The address {address} is {reason}; {SUBJECTS[kind]} may not call it.")


def validate_headers(headers: Any, what: str = "headers") -> None:
    if not isinstance(headers, Mapping):
        raise ValueError(f"The {what} must be an object of header names to string values.")
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"At most {MAX_HEADERS} {what}.")
    seen: set[str] = set()
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise ValueError(f"{name!r} is not a valid header name.")
        lowered = name.lower()
        if lowered in RESERVED_HEADERS:
            raise ValueError(f"The {name} header is set by mcp-host and cannot be configured.")
        if lowered in seen:
            raise ValueError(f"The {name} header is given twice.")
        seen.add(lowered)
        if not isinstance(value, str):
            raise ValueError(f"The value of {name} must be a string.")
        if len(value) > MAX_HEADER_VALUE:
            raise ValueError(f"The value of {name} is longer than {MAX_HEADER_VALUE} characters.")
        if any(not (32 <= ord(ch) < 127 or ch == "\t") for ch in value):
            # Visible ASCII only (RFC 9110 field values): no line breaks, no characters an HTTP library would
            # refuse later with an error message that quotes the value.
            raise ValueError(f"The value of {name} may contain only printable ASCII characters (no line breaks).")


def _timeout_bounds(kind: OutboundKind) -> tuple[float, float]:
    """The operator's default and maximum seconds for a call of ``kind`` (an http tool's or an upstream's)."""
    if kind == "upstream":
        return mcp_settings.UPSTREAM_DEFAULT_TIMEOUT_SECONDS, mcp_settings.UPSTREAM_MAX_TIMEOUT_SECONDS
    return mcp_settings.HTTP_TOOL_DEFAULT_TIMEOUT_SECONDS, mcp_settings.HTTP_TOOL_MAX_TIMEOUT_SECONDS


def validate_timeout(timeout: float | None, kind: OutboundKind = "http_tool") -> None:
    maximum = _timeout_bounds(kind)[1]
    if timeout is not None and not 0 < timeout <= maximum:
        raise ValueError(f"The timeout must be more than 0 and at most {maximum:g} seconds.")


def effective_timeout(timeout: float | None, kind: OutboundKind = "http_tool") -> float:
    """``timeout`` (``None``: the operator's default for ``kind``), at most the operator's maximum."""
    default, maximum = _timeout_bounds(kind)
    return float(min(default if timeout is None else timeout, maximum))


def display_url(url: str) -> str:
    """The URL without its query string (which may carry a key), for titles and lists."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(invalid URL)"
    suffix = "?…" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}{suffix}"


def parse_secret_headers(value: Any) -> dict[str, str]:
    """A mapping, or text of ``Name: value`` lines (blank lines ignored), as a validated header mapping."""
    if isinstance(value, str):
        headers: dict[str, str] = {}
        for number, line in enumerate(value.splitlines(), start=1):
            if not line.strip():
                continue
            name, colon, header_value = line.partition(":")
            if not colon or not name.strip():
                raise ValueError(f"Line {number} is not of the form 'Name: value'.")
            if name.strip() in headers:
                raise ValueError(f"The {name.strip()} header is given twice.")
            headers[name.strip()] = header_value.strip()
        value = headers
    validate_headers(value, "secret headers")
    return dict(value)


def open_secret_headers(token: str) -> dict[str, str]:
    """Decrypt stored secret headers (empty token: none). Raises ``SecretHeadersUnavailable``."""
    if not token:
        return {}
    try:
        value = orjson.loads(decrypt(token))
    except (InvalidToken, ValueError) as exc:
        raise SecretHeadersUnavailable("the secret headers cannot be decrypted with the configured keys") from exc
    if not isinstance(value, dict):
        raise SecretHeadersUnavailable("the stored secret headers are malformed")
    return {str(name): str(header) for name, header in value.items()}
