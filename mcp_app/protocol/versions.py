"""Protocol revisions this server speaks, and version negotiation for the ``initialize`` handshake.

Versions are ISO dates, so plain string comparison orders them. The handshake era is 2024-11-05 … 2025-11-25;
the stateless era starts at 2026-07-28.
"""

from __future__ import annotations

V2024_11_05 = "2024-11-05"
V2025_03_26 = "2025-03-26"
V2025_06_18 = "2025-06-18"
V2025_11_25 = "2025-11-25"

HANDSHAKE_VERSIONS: tuple[str, ...] = (V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25)
LATEST_HANDSHAKE_VERSION = V2025_11_25
# Assumed for stateless requests that carry no MCP-Protocol-Version header (transports spec, 2025-06-18).
DEFAULT_UNANNOUNCED_VERSION = V2025_03_26
# Answered to an ``initialize`` that names no version at all (clients of the first revision).
DEFAULT_UNVERSIONED_INITIALIZE = V2024_11_05


def negotiate(requested: object, supported: tuple[str, ...] = HANDSHAKE_VERSIONS) -> str:
    """The version to answer an ``initialize`` with.

    A supported requested version is echoed; an unknown one gets the latest supported (the spec requires a
    successful answer with another version); a request without a version gets the first revision.
    """
    if requested is None:
        return DEFAULT_UNVERSIONED_INITIALIZE if DEFAULT_UNVERSIONED_INITIALIZE in supported else supported[-1]
    if isinstance(requested, str) and requested in supported:
        return requested
    return max(supported)


def allows_batches(version: str) -> bool:
    """JSON-RPC batches exist in 2024-11-05 and 2025-03-26 only (removed in 2025-06-18)."""
    return version < V2025_06_18


def tool_input_errors_in_result(version: str) -> bool:
    """From 2025-11-25 argument-validation failures are tool results with ``isError`` (SEP-1303)."""
    return version >= V2025_11_25
