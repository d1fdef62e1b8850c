"""Client ID metadata documents, fetched through ``mcp_app.outbound`` (DOT's ``CIMD_METADATA_FETCHER``).

DOT decides when to fetch (a ``client_id`` that is an HTTPS URL, not yet known or stale), backs off a URL that
failed, checks the document (``client_id`` equal to its URL, a public client, its ``redirect_uris``) and caches
the client by the document's ``Cache-Control``. This fetcher owns the fetch itself:

- the URL by the draft's rules (HTTPS, a host, a valid port and a path, no credentials, fragment or dot
  segments), checked here: DOT checks it inside its own fetcher, which this one replaces;
- the connection through ``outbound.GuardedTransport`` against ``outbound.allowed_networks("cimd")``: every
  address the host resolves to must pass ``netguard`` (loopback, private, link-local, metadata and other
  non-public ranges refused unless ``MCP_APP["OUTBOUND_ALLOWED_NETWORKS"]`` or ``OAUTH_CIMD_ALLOWED_NETWORKS``
  lists them), the socket goes to the checked address (no DNS rebinding), the certificate is verified for the
  host (``outbound.ssl_context()``), no redirect is followed, no proxy from the environment;
- **one deadline over the whole fetch** (``CIMD_FETCH_TIMEOUT_SECONDS`` of ``OAUTH2_PROVIDER``): waiting for a
  slot, resolution, connection, TLS, the status line and headers, and the body. A server that drips its answer
  a byte at a time is cut off at the deadline, not at a timeout per read;
- at most ``MCP_APP["OAUTH_CIMD_FETCHES_PER_HOST"]`` fetches from one host at once in this process (more wait
  for a slot within their deadline): a slow host holds its own slots only, never those of other clients'
  hosts. DOT's global in-flight cap is off (``provider_settings``);
- the answer: 200, a JSON media type (``application/json`` or ``application/*+json``), at most
  ``CIMD_MAX_DOCUMENT_SIZE`` bytes (never read past it), a JSON object. Its cache lifetime is its
  ``Cache-Control``'s (``max-age``; ``no-store``/``no-cache`` the least), between DOT's
  ``CIMD_METADATA_MIN_AGE_SECONDS`` and ``CIMD_METADATA_MAX_AGE_SECONDS``.

It is configured through DOT's documented ``CIMD_METADATA_FETCHER`` setting (``provider_settings``) and uses only
DOT's public names (``CIMDError``, ``oauth2_settings``).

What the document says about the client (its URL, its logo) is kept for the consent page.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
from oauth2_provider import cimd
from oauth2_provider.settings import oauth2_settings

from .. import netguard, outbound
from ..conf import mcp_settings

HEADERS = {"Accept": "application/json, application/*+json", "Accept-Encoding": "identity"}
MAX_AGE = re.compile(r"max-age\s*=\s*(\d+)", re.IGNORECASE)

_slots = threading.Condition()
_in_flight: dict[str, int] = {}  # fetches under way per host, in this process


@contextlib.contextmanager
def host_slot(host: str, deadline: float) -> Iterator[None]:
    """One of ``OAUTH_CIMD_FETCHES_PER_HOST`` slots of ``host``, waited for until ``deadline`` (monotonic)."""
    limit = mcp_settings.OAUTH_CIMD_FETCHES_PER_HOST
    with _slots:
        while _in_flight.get(host, 0) >= limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise cimd.CIMDError(f"{limit} client metadata fetches from {host} already under way")
            _slots.wait(remaining)
        _in_flight[host] = _in_flight.get(host, 0) + 1
    try:
        yield
    finally:
        with _slots:
            left = _in_flight.pop(host) - 1
            if left:
                _in_flight[host] = left
            _slots.notify_all()


def client_id_host(client_id: str) -> str:
    """The host of ``client_id`` if it is a valid client ID URL (the module docstring), else ``CIMDError``."""
    parts = urlsplit(client_id)
    try:
        parts.port  # noqa: B018  (an out-of-range port raises on access)
    except ValueError as exc:
        raise cimd.CIMDError("client_id URL has an invalid port") from exc
    segments = parts.path.split("/")
    if parts.scheme != "https" or not parts.hostname or not parts.path or "." in segments or ".." in segments:
        raise cimd.CIMDError("client_id must be an https URL with a host and a path, without dot segments")
    if parts.username is not None or parts.password is not None or parts.fragment:
        raise cimd.CIMDError("client_id URL must not carry credentials or a fragment")
    return parts.hostname.lower()


def max_age(cache_control: str | None) -> int:
    """How long a document is cached, by its ``Cache-Control`` (the module docstring)."""
    floor = int(oauth2_settings.CIMD_METADATA_MIN_AGE_SECONDS)
    ceiling = int(oauth2_settings.CIMD_METADATA_MAX_AGE_SECONDS)
    lowered = (cache_control or "").lower()
    found = MAX_AGE.search(lowered)
    age = floor if "no-store" in lowered or "no-cache" in lowered else int(found.group(1)) if found else ceiling
    return max(floor, min(age, ceiling))


async def _get(url: str, max_size: int, timeout: float, deadline: float) -> tuple[Any, str | None]:  # noqa: ASYNC109
    """The document at ``url`` (parsed JSON) and its ``Cache-Control``. ``timeout`` bounds each step, ``deadline``
    (monotonic) the whole fetch."""
    transport = cast(httpx.AsyncBaseTransport, outbound.GuardedTransport(outbound.allowed_networks("cimd")))
    client = httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False, timeout=timeout)
    async with (
        asyncio.timeout(max(0.0, deadline - time.monotonic())),
        client,
        client.stream("GET", url, headers=HEADERS) as response,
    ):
        if response.headers.get("content-encoding", "identity").lower() != "identity":
            raise cimd.CIMDError("client_id document is encoded (Content-Encoding)")  # its size would not hold
        if response.status_code != 200:
            raise cimd.CIMDError(f"client_id document returned HTTP {response.status_code}")
        media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json" and not (
            media_type.startswith("application/") and media_type.endswith("+json")
        ):
            raise cimd.CIMDError(f"client_id document is not JSON (Content-Type: {media_type!r})")
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > max_size:
                raise cimd.CIMDError("client_id document exceeds the maximum allowed size")
        cache_control = response.headers.get("cache-control")
    try:
        return json.loads(bytes(body)), cache_control
    except ValueError as exc:
        raise cimd.CIMDError("client_id document is not valid JSON") from exc


def fetch_document(client_id: str) -> tuple[dict[str, Any], int]:
    """``(metadata, max_age_seconds)`` of the document at ``client_id``, or ``cimd.CIMDError``; see the module
    docstring for the bounds."""
    timeout = float(oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS)
    deadline = time.monotonic() + timeout
    with host_slot(client_id_host(client_id), deadline):
        try:
            data, cache_control = asyncio.run(
                _get(client_id, oauth2_settings.CIMD_MAX_DOCUMENT_SIZE, timeout, deadline)
            )
        except TimeoutError as exc:
            raise cimd.CIMDError(f"client_id document not fetched within {timeout:g} s") from exc
        except netguard.ForbiddenAddress as exc:
            raise cimd.CIMDError(f"client_id host refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise cimd.CIMDError(f"could not fetch client_id document: {exc!r}") from exc
    if not isinstance(data, dict):
        raise cimd.CIMDError("client_id document must be a JSON object")
    return data, max_age(cache_control)


class NetguardMetadataFetcher:
    """DOT's documented fetcher contract (``CIMD_METADATA_FETCHER``: ``fetch(client_id) -> (metadata, max_age)``
    or ``CIMDError``) over ``fetch_document``; the client's stated URL and logo are kept for the consent page."""

    def fetch(self, client_id: str) -> Any:
        metadata, max_age = fetch_document(client_id)
        from ..models import OAuthClientProfile

        OAuthClientProfile.objects.remember(client_id, metadata)
        return metadata, max_age
