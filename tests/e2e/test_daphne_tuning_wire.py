"""A real daphne with ``MCP_DAPHNE_TUNING=1``: the levers are applied on the installed versions, and the wire is
unchanged (keep-alive calls, a form-typed body, a streamed answer, a 500-free run)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import endpoint
from tests.helpers import post_headers as headers

from .conftest import running_daphne

pytestmark = pytest.mark.e2e

APPLIED = "daphne tuning applied: finished requests reaped at once, POST bodies not parsed as forms"


def call(request_id: int, text: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }


def test_the_levers_are_applied_and_the_wire_is_unchanged(
    live_access: Access, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with running_daphne(tmp_path_factory, {"MCP_DAPHNE_TUNING": "1"}) as server:
        url = endpoint(server.url, live_access)
        with httpx.Client(timeout=10, headers={**headers(live_access), "MCP-Protocol-Version": "2025-11-25"}) as client:
            # Many requests on one keep-alive connection: each finished request is reaped before the next.
            for request_id in range(1, 41):
                reply = client.post(url, json=call(request_id, f"t{request_id}"))
                assert reply.status_code == 200, reply.text
                assert reply.json() == {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {"content": [{"type": "text", "text": f"t{request_id}"}]},
                }
            # A form-typed body is not parsed by Twisted any more; the endpoint still answers it with its 415.
            form = client.post(url, content=b"a=1", headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert form.status_code == 415
            assert form.json()["error"]["code"] == -32600
            # A streamed answer (progress over SSE) still arrives whole.
            streamed = client.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 99,
                    "method": "tools/call",
                    "params": {"name": "progress_demo", "arguments": {"steps": 3}, "_meta": {"progressToken": "p"}},
                },
            )
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")
            assert streamed.text.count('"notifications/progress"') == 3
            assert '"id":99,"result"' in streamed.text
    log = server.stderr()
    assert log.count(APPLIED) == 1, log
    assert "Exception inside application" not in log, log
