"""Client ID metadata documents, fetched through ``mcp_app.outbound`` (DOT's ``CIMD_METADATA_FETCHER``): the URL's
rules, an SSRF-guarded connection, one deadline, a per-host cap, and the answer's checks; DOT does the rest.
Design: docs/oauth.md ("The metadata document fetch").
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
    """The host of ``client_id`` if it is a valid client ID URL (docs/oauth.md), else ``CIMDError``."""
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
    """How long a document is cached, by its ``Cache-Control`` (docs/oauth.md)."""
    floor = int(oauth2_settings.CIMD_METADATA_MIN_AGE_SECONDS)
    ceiling = int(oauth2_settings.CIMD_METADATA_MAX_AGE_SECONDS)
    lowered = (cache_control or "").lower()
    found = MAX_AGE.search(lowered)
    age = floor if "no-store" in lowered or "no-cache" in lowered else int(found.group(1)) if found else ceiling
    return max(floor, min(age, ceiling))


async def _get(url: str, max_size: int, timeout: float, deadline: float) -> tuple[Any, str | None]:  # noqa: ASYNC109
    """The document at ``url`` (parsed) and its ``Cache-Control``, each step within ``timeout``, all by ``deadline``."""
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
    """``(metadata, max_age_seconds)`` of the document at ``client_id``, or ``cimd.CIMDError`` (docs/oauth.md)."""
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
