"""A daphne process that is stopped writes the last-used stamps and session activity it had queued."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import endpoint
from tests.helpers import post_headers as headers

from .conftest import running_daphne

pytestmark = pytest.mark.e2e

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}


def test_a_stopped_process_writes_what_it_had_queued(
    live_access: Access, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from mcp_app.models import AgentToken

    # The writer would wait an hour: only the flush at exit can write the stamp.
    with running_daphne(tmp_path_factory, {"MCP_WRITE_BEHIND_INTERVAL_SECONDS": "3600"}) as server:
        reply = httpx.post(endpoint(server.url, live_access), json=CALL, headers=headers(live_access), timeout=10)
        assert reply.status_code == 200
        assert AgentToken.objects.get(pk=live_access.token.pk).last_used_at is None  # queued, not written
    assert server.process.returncode is not None
    assert AgentToken.objects.get(pk=live_access.token.pk).last_used_at is not None
