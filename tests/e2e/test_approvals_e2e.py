"""Calls that wait for approval against a real daphne (SQLite alone, or PostgreSQL + Redis), decided by
``manage.py mcp_approvals`` run as a process of its own, as a tenant admin would from a shell:

- a 2026-07-28 client declaring the tasks extension gets a parked task at once; once approved from the other
  process, ``tasks/get`` shows it completed with the tool's result (the decision reaches daphne through the channel
  layer with Redis, through its re-reads of the approval without);
- a 2025-11-25 client without tasks gets -32014 (HTTP 200) after ``APPROVAL_WAIT_SECONDS`` (10 s, the default
  daphne runs with) and within a margin, with the approval's id; re-issued once approved, the call runs, once.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from mcp_app.models import Approval, Tool
from mcp_app.protocol.errors import APPROVAL_PENDING
from tests.conftest import Access
from tests.helpers import DECLARING, LEGACY, endpoint, modern_body, post_headers, routing_headers, rpc

pytestmark = pytest.mark.e2e

WAIT_SECONDS = 10.0  # APPROVAL_WAIT_SECONDS of the session's daphne (the default)
DECIDED_WITHIN = 15.0  # a decision made in another process reaches the parked call (re-read backs off to 30 s)
RESULT = {"content": [{"type": "text", "text": "dropped"}]}
_admins = itertools.count(1)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


@pytest.fixture
def gated(live_access: Access, tool_factory: Callable[..., Any], member_factory: Callable[..., Any]) -> Any:
    """``live_access``'s server with ``drop_table`` (static, requires approval), and an admin of its tenant."""
    tool_factory(live_access.server, "drop_table", kind=Tool.Kind.STATIC, static_result=RESULT, requires_approval=True)
    admin = member_factory((live_access.tenant, "admin"), username=f"approver-{next(_admins)}")
    return live_access, admin.username


def _decide_elsewhere(access: Access, approval_id: int, username: str, verb: str = "approve") -> str:
    """``manage.py mcp_approvals approve|deny`` in a process of its own, on this test's database and Redis."""
    from django.conf import settings
    from django.db import connection

    from tests.e2e.conftest import database_url

    env = {key: value for key, value in os.environ.items() if key not in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH")}
    env.update({"DJANGO_SETTINGS_MODULE": "mcp_host.settings", "DATABASE_URL": database_url(connection.settings_dict)})
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    else:
        env.pop("REDIS_URL", None)
        env["MCP_INVALIDATION"] = "database"
    arguments = [verb, "--tenant", access.tenant.slug, str(approval_id), "--user", username]
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp_approvals", *arguments],
        cwd=settings.BASE_DIR,
        env=env,
        check=False,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _modern(http: httpx.AsyncClient, base: str, access: Access, method: str, params: dict[str, Any]) -> Any:
    body = modern_body(method, params, capabilities=DECLARING)
    reply = await http.post(endpoint(base, access), json=body, headers=post_headers(access, **routing_headers(body)))
    assert reply.status_code == 200, reply.text
    return reply.json()


async def test_a_parked_task_completes_once_approved_from_another_process(daphne_url, gated, http) -> None:
    access, admin = gated
    created = (await _modern(http, daphne_url, access, "tools/call", {"name": "drop_table", "arguments": {}}))["result"]
    assert (created["resultType"], created["status"]) == ("task", "working")
    approval_id = int(created["statusMessage"].removeprefix("Waiting for approval "))
    out = await asyncio.to_thread(_decide_elsewhere, access, approval_id, admin)
    assert out.startswith(f"Approved approval #{approval_id}: drop_table")
    deadline = time.monotonic() + DECIDED_WITHIN
    while True:
        got = (await _modern(http, daphne_url, access, "tasks/get", {"taskId": created["taskId"]}))["result"]
        if got["status"] == "completed":
            break
        assert got["status"] == "working", got
        assert time.monotonic() < deadline, f"the approved task did not complete within {DECIDED_WITHIN}s"
        await asyncio.sleep(0.2)
    assert got["result"]["content"] == RESULT["content"]
    used = await asyncio.to_thread(lambda: Approval.objects.get(pk=approval_id).status)
    assert used == "used"


async def test_a_client_without_tasks_waits_the_bound_then_reissues_once_approved(daphne_url, gated, http) -> None:
    access, admin = gated
    url = endpoint(daphne_url, access)
    headers = post_headers(access, **{"MCP-Protocol-Version": LEGACY})
    body = rpc("tools/call", {"name": "drop_table", "arguments": {}}, id=7)
    started = time.monotonic()
    reply = await http.post(url, json=body, headers=headers)
    elapsed = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    error = reply.json()["error"]
    assert error["code"] == APPROVAL_PENDING
    assert WAIT_SECONDS <= elapsed <= WAIT_SECONDS + 5.0
    approval_id = error["data"]["approvalId"]
    assert set(error["data"]) == {"approvalId", "expiresAt"}
    await asyncio.to_thread(_decide_elsewhere, access, approval_id, admin)
    ran = await http.post(url, json=body, headers=headers)
    assert ran.status_code == 200 and ran.json()["result"]["content"] == RESULT["content"]
