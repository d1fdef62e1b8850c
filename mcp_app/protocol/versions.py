"""Protocol revisions this server speaks, the two eras, and version negotiation for the ``initialize`` handshake.

Versions are ISO dates, so plain string comparison orders them. The handshake ("legacy") era is 2024-11-05 …
2025-11-25; the stateless ("modern") era starts at 2026-07-28 (the ``_meta`` envelope and routing headers).
"""

from __future__ import annotations

V2024_11_05 = "2024-11-05"
V2025_03_26 = "2025-03-26"
V2025_06_18 = "2025-06-18"
V2025_11_25 = "2025-11-25"
V2026_07_28 = "2026-07-28"

LEGACY = "legacy"
MODERN = "modern"

HANDSHAKE_VERSIONS: tuple[str, ...] = (V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25)
MODERN_VERSIONS: tuple[str, ...] = (V2026_07_28,)
ALL_VERSIONS: tuple[str, ...] = HANDSHAKE_VERSIONS + MODERN_VERSIONS
# Assumed for stateless requests that carry no MCP-Protocol-Version header (transports spec, 2025-06-18).
DEFAULT_UNANNOUNCED_VERSION = V2025_03_26
# Answered to an ``initialize`` that names no version at all (clients of the first revision).
DEFAULT_UNVERSIONED_INITIALIZE = V2024_11_05


def era_of(version: str) -> str:
    return MODERN if version >= V2026_07_28 else LEGACY


def handshake_versions(supported: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(version for version in supported if version in HANDSHAKE_VERSIONS)


def modern_versions(supported: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(version for version in supported if version in MODERN_VERSIONS)


def newest_first(supported: tuple[str, ...]) -> list[str]:
    """How supported versions are listed to clients (discover, -32022): the newest, i.e. modern, first."""
    return sorted(supported, reverse=True)


def negotiate(requested: object, supported: tuple[str, ...] = HANDSHAKE_VERSIONS) -> str:
    """The version to answer an ``initialize`` with (``supported``: handshake-era versions only): a supported
    requested version is echoed, an unknown one gets the latest supported (the spec requires a successful answer
    with another version), a request without a version gets the first revision."""
    if requested is None:
        return DEFAULT_UNVERSIONED_INITIALIZE if DEFAULT_UNVERSIONED_INITIALIZE in supported else max(supported)
    if isinstance(requested, str) and requested in supported:
        return requested
    return max(supported)


def legacy_request_version(header: str | None, session_version: str | None, supported: tuple[str, ...]) -> str | None:
    """The version a handshake-era request (not ``initialize``) is served under, or ``None`` for a 400.

    ``header`` is its ``MCP-Protocol-Version``, ``session_version`` what its session negotiated (``None``:
    sessionless), ``supported`` the server's handshake-era versions. The spec asks 400 only for an invalid or
    unsupported header: on a session, a supported header that differs from the session's version (the official
    conformance suite sends 2025-03-26 on 2025-11-25 sessions) is served under the session's version, its
    features and framing. Without a session the header decides; a missing one means 2025-03-26 where served,
    else the latest supported.
    """
    if header is not None and header not in supported:
        return None
    if session_version is not None:
        return session_version
    if header is not None:
        return header
    return DEFAULT_UNANNOUNCED_VERSION if DEFAULT_UNANNOUNCED_VERSION in supported else max(supported)


def allows_batches(version: str) -> bool:
    """JSON-RPC batches exist in 2024-11-05 and 2025-03-26 only (removed in 2025-06-18)."""
    return version < V2025_06_18


def tool_input_errors_in_result(version: str) -> bool:
    """In 2025-11-25 argument-validation failures are ``isError`` results (SEP-1303); 2026-07-28 makes them
    protocol errors again (-32602, HTTP 400, before the tool runs)."""
    return V2025_11_25 <= version < V2026_07_28
