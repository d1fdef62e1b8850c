"""Version negotiation for ``initialize`` and the per-revision rules (batches, tool input errors)."""

from __future__ import annotations

import pytest

from mcp_app.protocol.versions import allows_batches, negotiate, tool_input_errors_in_result

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
