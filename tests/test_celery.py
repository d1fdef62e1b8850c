"""The reference deployment's Celery beat runs the purge of expired sessions, tasks and events."""

from __future__ import annotations


def test_beat_schedules_the_registered_purge_task() -> None:
    from mcp_app import tasks
    from mcp_host.celery import app

    entry = app.conf.beat_schedule["mcp-purge-expired"]
    assert entry["task"] == tasks.purge_expired.name == "mcp_app.purge_expired"
    assert entry["schedule"] == 3600.0
    assert "mcp_app.purge_expired" in app.tasks


def test_beat_schedules_the_reaper_of_worker_calls_and_the_worker_task_is_registered() -> None:
    from mcp_app.workers.running import tasks
    from mcp_host.celery import app

    entry = app.conf.beat_schedule["mcp-reap-worker-calls"]
    assert entry["task"] == tasks.reap_worker_calls.name == "mcp_app.reap_worker_calls"
    assert entry["schedule"] == 30.0
    assert "mcp_app.run_tool_call" in app.tasks
    assert tasks.run_tool_call.acks_late is True


def test_worker_loss_is_rejected_back_to_the_queue_only_with_the_requeue_policy(settings) -> None:
    from mcp_app.workers.running import tasks

    settings.MCP_APP = {**settings.MCP_APP, "WORKER_LOST_CALLS": "requeue"}
    assert tasks.run_tool_call.reject_on_worker_lost is True
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_LOST_CALLS": "fail"}
    assert tasks.run_tool_call.reject_on_worker_lost is False
