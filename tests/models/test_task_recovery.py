"""Orphan recovery (``ToolTask.objects.fail_orphaned``): which tasks die with the process that ran them."""

from __future__ import annotations

from typing import Any

from mcp_app.models import ToolTask

DEAD, ALIVE = "host:1:dead", "host:2:alive"


def test_working_tasks_and_handshake_era_tasks_waiting_for_input_fail_with_their_process(
    db: Any, access_factory: Any
) -> None:
    access = access_factory(tools=())

    def task(status: str, owner: str, version: str) -> ToolTask:
        return ToolTask.objects.create_task(
            server=access.server,
            agent=access.agent,
            tool_name="t",
            arguments={},
            ttl_ms=60_000,
            status=status,
            owner=owner,
            protocol_version=version,
        )

    working = task("working", DEAD, "2026-07-28")
    waiting_in_process = task("input_required", DEAD, "2025-11-25")  # its coroutine awaits the answer
    parked = task("input_required", DEAD, "2026-07-28")  # resumed by tasks/update in any process
    alive = task("working", ALIVE, "2025-11-25")

    assert ToolTask.objects.fail_orphaned(lambda owner: owner == DEAD) == 2

    statuses = {row.pk: row.status for row in ToolTask.objects.all()}
    assert statuses == {
        working.pk: "failed",
        waiting_in_process.pk: "failed",
        parked.pk: "input_required",
        alive.pk: "working",
    }
