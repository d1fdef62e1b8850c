"""The reference deployment's Celery beat runs the purge of expired sessions, tasks and events."""

from __future__ import annotations


def test_beat_schedules_the_registered_purge_task() -> None:
    from mcp_app import tasks
    from mcp_host.celery import app

    entry = app.conf.beat_schedule["mcp-purge-expired"]
    assert entry["task"] == tasks.purge_expired.name == "mcp_app.purge_expired"
    assert entry["schedule"] == 3600.0
    assert "mcp_app.purge_expired" in app.tasks
