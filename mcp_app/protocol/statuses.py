"""Which HTTP status carries a JSON-RPC answer, per protocol era (the status matrix of the transports spec).

Pure functions of the answer: the transport decides nothing about JSON-RPC errors, and its own refusals (auth,
unknown server or session, 405, 415, 421) are not decided here. In the stateless era, an error outside the
validation ladder (``MODERN_STATUS``) rides on 200, as the TypeScript SDK does (the spec leaves it open).
"""

from __future__ import annotations

from typing import Any

from .errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

BODY_ERROR_CODES = frozenset({PARSE_ERROR, INVALID_REQUEST})
MODERN_STATUS: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


def _error_code(outcome: Any) -> Any:
    if isinstance(outcome, dict):
        error = outcome.get("error")
        if isinstance(error, dict):
            return error.get("code")
    return None


def legacy_status(outcome: Any) -> int:
    """Handshake era: 400 for a single answer that refuses the whole body, else 200 (batches included)."""
    return 400 if _error_code(outcome) in BODY_ERROR_CODES else 200


def modern_status(outcome: Any) -> int:
    """Stateless era: the status of a dispatched request's answer (an error's code decides; results are 200)."""
    return MODERN_STATUS.get(_error_code(outcome), 200)


def modern_refusal_status(code: int) -> int:
    """Stateless era: the status of a request refused before dispatch with ``code`` (400 unless mapped)."""
    return MODERN_STATUS.get(code, 400)
