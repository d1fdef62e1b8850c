"""The HTTP status of each JSON-RPC answer, per era. Expected values are the transports spec's status matrix
(``docs/mcp-spec.md`` §2.3 and the 2025-11-25 transport rules), written out here, not read from the code."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.protocol.statuses import legacy_status, modern_refusal_status, modern_status


def error(code: int, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": "x"}}


RESULT = {"jsonrpc": "2.0", "id": 1, "result": {}}


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (RESULT, 200),
        (error(-32700, None), 400),  # parse error: the body as a whole
        (error(-32600, None), 400),  # invalid request: the body as a whole
        (error(-32601), 200),  # unknown method: "status unspecified"; rides on 200 like other method errors
        (error(-32602), 200),
        (error(-32603), 200),
        (error(-32001), 200),
        ([RESULT, error(-32600)], 200),  # a batch is answered as a whole with 200
    ],
)
def test_handshake_era_refuses_only_whole_bodies_with_400(outcome: Any, status: int) -> None:
    assert legacy_status(outcome) == status


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (-32700, 400),
        (-32600, 400),
        (-32602, 400),  # missing _meta keys: 400 + -32602
        (-32020, 400),  # missing or mismatched headers, Mcp-Param-*: 400 + -32020
        (-32021, 400),  # missing client capability: 400 + -32021
        (-32022, 400),  # unsupported version: 400 + -32022
        (-32601, 404),  # unknown method: 404 + -32601
        (-32603, 200),  # other in-band errors: unspecified; TypeScript keeps them on 200
        (-32001, 200),
        (-32002, 200),
    ],
)
def test_stateless_era_status_of_a_dispatched_answer(code: int, status: int) -> None:
    assert modern_status(error(code)) == status


def test_stateless_era_results_are_200() -> None:
    assert modern_status(RESULT) == 200
    assert modern_status({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}}) == 200


@pytest.mark.parametrize(
    ("code", "status"), [(-32602, 400), (-32020, 400), (-32022, 400), (-32601, 404), (-32000, 400)]
)
def test_stateless_era_refusals_before_dispatch_are_400_unless_mapped(code: int, status: int) -> None:
    assert modern_refusal_status(code) == status
