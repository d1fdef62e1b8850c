"""Client ID metadata documents fetched through ``mcp_app.netguard`` (DOT's ``CIMD_METADATA_FETCHER``).

DOT validates the ``client_id`` URL (HTTPS, no fragment or credentials), bounds the document's size
(``CIMD_MAX_DOCUMENT_SIZE``) and the fetch's time (``CIMD_FETCH_TIMEOUT_SECONDS``, one deadline for every
address), caches the result by the document's ``Cache-Control`` (between ``CIMD_METADATA_MIN_AGE_SECONDS`` and
``CIMD_METADATA_MAX_AGE_SECONDS``) and enforces its ``redirect_uris``. This fetcher replaces only the address
check: every address the host resolves to must pass ``netguard`` (loopback, private, link-local, metadata and
other non-public ranges refused) unless ``outbound.allowed_networks("cimd")`` allow-lists it
(``MCP_APP["OUTBOUND_ALLOWED_NETWORKS"]`` or ``MCP_APP["OAUTH_CIMD_ALLOWED_NETWORKS"]``); the
connection goes to the checked addresses only (no DNS rebinding). Certificates are verified against the
system's trust store (``SSL_CERT_FILE`` may name another bundle).
"""

from __future__ import annotations

import asyncio
from typing import Any

from oauth2_provider import cimd

from .. import netguard, outbound


def _resolve_and_validate(hostname: str, port: int) -> list[str]:
    allow = outbound.allowed_networks("cimd")
    try:
        addresses = asyncio.run(netguard.resolve_checked(hostname, port, allow, outbound.resolver))
    except netguard.ForbiddenAddress as exc:
        raise cimd.CIMDError(f"client_id host refused: {exc}") from exc
    return [str(address) for address in addresses]


class NetguardMetadataFetcher(cimd.SafeMetadataFetcher):
    """DOT's fetcher with netguard's address check (installed when this module is imported, i.e. when DOT loads
    the fetcher named by ``CIMD_METADATA_FETCHER``: DOT's ``fetch`` resolves through a module-level function).
    What the document says about the client (its URL, its logo) is kept for the consent page."""

    def fetch(self, client_id: str) -> Any:
        metadata, max_age = super().fetch(client_id)
        from ..models import OAuthClientProfile

        OAuthClientProfile.objects.remember(client_id, metadata)
        return metadata, max_age


cimd._resolve_and_validate = _resolve_and_validate
