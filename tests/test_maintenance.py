"""``mcp_purge`` and ``purge_expired``: expired tool calls, sessions and tasks go through their managers' verbs,
fresh ones stay; ``--dry-run`` counts exactly what would go and deletes nothing."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from mcp_app.maintenance import purge_expired
from mcp_app.models import McpSession, ToolCall, ToolTask


def tool_call(access: Any, started: Any) -> ToolCall:
    return ToolCall.objects.create(
        tenant=access.tenant,
        server=access.server,
        agent=access.agent,
        server_key=access.server.server_id,
        agent_key=access.agent.agent_id,
        tool_name="echo",
        arguments_digest="0" * 64,
        status="ok",
        started_at=started,
        finished_at=started,
        duration_ms=1.0,
        era="legacy",
        protocol_version="2025-11-25",
    )


@pytest.fixture
def expired_and_fresh(db: Any, access_factory: Any, settings: Any) -> Any:
    access = access_factory(tools=())
    now = timezone.now()
    settings.MCP_APP = {**settings.MCP_APP, "AUDIT_RETENTION_DAYS": 30, "SESSION_IDLE_SECONDS": 3600}
    old_call = tool_call(access, now - timedelta(days=31))
    new_call = tool_call(access, now - timedelta(days=29))
    stale, _ = McpSession.objects.open_session(server=access.server, agent=access.agent, protocol_version="2025-11-25")
    McpSession.objects.filter(pk=stale.pk).update(last_seen_at=now - timedelta(hours=2))
    live, _ = McpSession.objects.open_session(server=access.server, agent=access.agent, protocol_version="2025-11-25")
    old_task = ToolTask.objects.create_task(
        server=access.server, agent=access.agent, tool_name="echo", arguments={}, ttl_ms=1000
    )
    ToolTask.objects.filter(pk=old_task.pk).update(expires_at=now - timedelta(seconds=1))
    new_task = ToolTask.objects.create_task(
        server=access.server, agent=access.agent, tool_name="echo", arguments={}, ttl_ms=3_600_000
    )
    return {"calls": (old_call, new_call), "sessions": (stale, live), "tasks": (old_task, new_task)}


def survivors() -> tuple[set[int], set[int], set[int]]:
    return (
        set(ToolCall.objects.values_list("pk", flat=True)),
        set(McpSession.objects.values_list("pk", flat=True)),
        set(ToolTask.objects.values_list("pk", flat=True)),
    )


def test_dry_run_counts_and_keeps_everything(expired_and_fresh: Any) -> None:
    before = survivors()
    out = StringIO()
    call_command("mcp_purge", "--dry-run", stdout=out)
    assert out.getvalue().splitlines() == [
        "would delete 1 expired tool calls",
        "would delete 1 expired sessions",
        "would delete 1 expired tasks",
        "would delete 0 expired SSE event streams",
        "would delete 0 expired approvals",
        "would fail 0 worker calls past their deadline",
    ]
    assert survivors() == before


def test_purge_deletes_only_what_expired(expired_and_fresh: Any) -> None:
    out = StringIO()
    call_command("mcp_purge", stdout=out)
    assert out.getvalue().splitlines() == [
        "deleted 1 expired tool calls",
        "deleted 1 expired sessions",
        "deleted 1 expired tasks",
        "deleted 0 expired SSE event streams",
        "deleted 0 expired approvals",
        "failed 0 worker calls past their deadline",
    ]
    calls, sessions, tasks = survivors()
    assert calls == {expired_and_fresh["calls"][1].pk}
    assert sessions == {expired_and_fresh["sessions"][1].pk}
    assert tasks == {expired_and_fresh["tasks"][1].pk}
    assert purge_expired() == {"tool calls": 0, "sessions": 0, "tasks": 0, "SSE event streams": 0, "approvals": 0}
