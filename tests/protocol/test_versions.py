"""Version negotiation for ``initialize`` and the per-revision rules (batches, tool input errors)."""

from __future__ import annotations

import pytest

from mcp_app.protocol.versions import allows_batches, legacy_request_version, negotiate, tool_input_errors_in_result

SUPPORTED = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


@pytest.mark.parametrize("version", SUPPORTED)
def test_negotiate_echoes_a_supported_version(version: str) -> None:
    assert negotiate(version) == version


@pytest.mark.parametrize(
    "requested", ["2099-01-01", "2024-01-01", "2026-07-28", "", "latest", 20251125, ["2025-06-18"]]
)
def test_negotiate_answers_an_unknown_version_with_the_latest(requested: object) -> None:
    assert negotiate(requested) == "2025-11-25"


def test_negotiate_without_a_version_answers_the_first_revision() -> None:
    assert negotiate(None) == "2024-11-05"


def test_negotiate_without_a_version_falls_back_to_latest_when_first_revision_unsupported() -> None:
    assert negotiate(None, ("2025-03-26", "2025-06-18")) == "2025-06-18"


@pytest.mark.parametrize(
    ("version", "allowed"),
    [
        ("2024-11-05", True),
        ("2025-03-26", True),
        ("2025-06-18", False),
        ("2025-11-25", False),
        ("2026-07-28", False),
    ],
)
def test_allows_batches(version: str, allowed: bool) -> None:
    assert allows_batches(version) is allowed


@pytest.mark.parametrize(
    ("version", "in_result"),
    [
        ("2024-11-05", False),
        ("2025-03-26", False),
        ("2025-06-18", False),
        ("2025-11-25", True),
        ("2026-07-28", False),
    ],
)
def test_tool_input_errors_in_result(version: str, in_result: bool) -> None:
    assert tool_input_errors_in_result(version) is in_result


# The version a handshake-era request is served under (transports spec, 2025-06-18 and later: the client sends
# MCP-Protocol-Version after initialize; absent and otherwise unknown means 2025-03-26; invalid or unsupported is
# 400). ``None`` is the 400.
ALL_HANDSHAKE = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


@pytest.mark.parametrize(
    ("header", "session", "supported", "served"),
    [
        # On a session: the session's version, whatever supported version the header names (the official
        # conformance suite sends 2025-03-26 on its 2025-11-25 sessions and expects them served).
        ("2025-03-26", "2025-11-25", ALL_HANDSHAKE, "2025-11-25"),
        ("2025-11-25", "2025-11-25", ALL_HANDSHAKE, "2025-11-25"),
        ("2024-11-05", "2025-06-18", ALL_HANDSHAKE, "2025-06-18"),
        (None, "2025-11-25", ALL_HANDSHAKE, "2025-11-25"),
        # Invalid or unsupported: 400, on a session too.
        ("2099-01-01", "2025-11-25", ALL_HANDSHAKE, None),
        ("garbage", None, ALL_HANDSHAKE, None),
        ("2026-07-28", None, ALL_HANDSHAKE, None),
        ("2024-11-05", "2025-11-25", ("2025-06-18", "2025-11-25"), None),
        # Sessionless: the header decides; absent means 2025-03-26 where it is served, else the latest.
        ("2025-06-18", None, ALL_HANDSHAKE, "2025-06-18"),
        (None, None, ALL_HANDSHAKE, "2025-03-26"),
        (None, None, ("2025-06-18", "2025-11-25"), "2025-11-25"),
    ],
)
def test_the_version_a_handshake_era_request_is_served_under(
    header: str | None, session: str | None, supported: tuple[str, ...], served: str | None
) -> None:
    assert legacy_request_version(header, session, supported) == served
