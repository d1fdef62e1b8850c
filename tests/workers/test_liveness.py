"""``mcp_app.workers.serving.liveness``'s verdicts on a record, with the real heartbeat backend in Redis: a call no worker
took (failed, or sent again once when workers consume its queue), a call whose worker stopped beating
(re-queued under a new Celery id and sent again, or failed, per ``WORKER_LOST_CALLS``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from mcp_app import heartbeat
from mcp_app.models import ToolTask
from mcp_app.workers import records
from mcp_app.workers.serving import liveness
from tests.conftest import require_redis

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

TIMEOUT = 1.5
BOUND_SECONDS = 10.0


@pytest.fixture
def beats(settings: Any, use_backend: Any) -> Iterator[None]:
    """A heartbeat in Redis with a short timeout, queue ``live-test``; this process has beaten long enough to
    judge others."""
    use_backend("HEARTBEAT", heartbeat.RedisHeartbeats(require_redis(), prefix="mcp:t-live"))
    config = {
        "HEARTBEAT_INTERVAL_SECONDS": 0.2,
        "HEARTBEAT_TIMEOUT_SECONDS": TIMEOUT,
        "WORKER_QUEUE": "live-test",
        "WORKER_DISPATCH": "celery",
        "WORKER_QUEUE_TIMEOUT_SECONDS": 5.0,
    }
    with override_settings(MCP_APP={**settings.MCP_APP, **config}):
        heartbeat.start()
        heartbeat.backend().beat("gate:1:x", [])
        started = time.monotonic()
        while heartbeat.dead(["gate:1:x"]) != {"gate:1:x"}:  # silent, and this process healthy for a timeout
            assert time.monotonic() - started < BOUND_SECONDS
            time.sleep(0.05)
        yield
    heartbeat.backend().leave("live-worker:1:a", ["live-test"])


def _record(access: Any, **fields: Any) -> ToolTask:
    record, _ = ToolTask.objects.create_worker_call(
        task_id=records.new_task_id(),
        server_pk=access.server.pk,
        agent_pk=access.agent.pk,
        tool_name="worker_job",
        arguments={},
        timeout=60,
        client_capabilities={},
        protocol_version="2026-07-28",
        request_id=1,
    )
    ToolTask.objects.filter(pk=record.pk).update(**fields)
    return ToolTask.objects.get(pk=record.pk)


def test_a_call_no_worker_took_in_time_fails_when_no_worker_consumes_its_queue(
    beats: None, access_factory: Any
) -> None:
    record = _record(access_factory(tools=("worker_job",)), updated_at=timezone.now() - timedelta(seconds=6))
    sent: list[ToolTask] = []
    assert not liveness.check(_record(access_factory(tools=("worker_job",))), sent.append)  # not overdue yet
    assert liveness.check(record, sent.append)
    record.refresh_from_db()
    assert sent == [] and record.status == "failed" and record.error["code"] == -32603
    assert "No worker took this call within 5 s" in record.status_message


def test_a_call_no_worker_took_is_sent_again_once_when_workers_consume_its_queue(
    beats: None, access_factory: Any
) -> None:
    record = _record(access_factory(tools=("worker_job",)), updated_at=timezone.now() - timedelta(seconds=6))
    sent: list[ToolTask] = []
    heartbeat.backend().beat("live-worker:1:a", ["live-test"])  # a worker consumes the queue
    assert liveness.check(record, sent.append)
    again = ToolTask.objects.get(pk=record.pk)
    assert again.status == "queued" and again.celery_id != record.celery_id
    assert again.status_message == liveness.RESENT_MESSAGE and [s.celery_id for s in sent] == [again.celery_id]
    ToolTask.objects.filter(pk=record.pk).update(updated_at=timezone.now() - timedelta(seconds=6))
    assert liveness.check(ToolTask.objects.get(pk=record.pk), sent.append)  # the second time: failed
    assert ToolTask.objects.get(pk=record.pk).status == "failed" and len(sent) == 1


def _unwritten(access: Any, **fields: Any) -> ToolTask:
    """A call as ``dispatch_unwritten`` sends one: its record unsaved, no row."""
    record = _record(access)
    ToolTask.objects.filter(pk=record.pk).delete()
    record.pk = None
    for name, value in fields.items():
        setattr(record, name, value)
    return record


def test_a_call_sent_unwritten_no_worker_took_is_sent_again_once_then_failed_by_its_awaiting_process(
    beats: None, access_factory: Any
) -> None:
    """``read_unwritten``: the awaiting process's clock judges it as ``check`` judges a written call: not yet;
    sent again once (under a new Celery id) when workers consume the queue; then a ``failed`` tombstone."""
    access = access_factory(tools=("worker_job",))
    sent: list[ToolTask] = []
    fresh = _unwritten(access)
    assert liveness.read_unwritten(fresh, sent.append) is fresh and sent == []  # not overdue yet
    record = _unwritten(access, updated_at=timezone.now() - timedelta(seconds=6))
    first_id = record.celery_id
    heartbeat.backend().beat("live-worker:1:a", ["live-test"])  # a worker consumes the queue
    again = liveness.read_unwritten(record, sent.append)
    assert again.pk is None and again.celery_id != first_id and [s.celery_id for s in sent] == [again.celery_id]
    assert not ToolTask.objects.filter(task_id=record.task_id).exists()
    again.updated_at = timezone.now() - timedelta(seconds=6)
    failed = liveness.read_unwritten(again, sent.append)  # the second time: failed
    assert failed.pk is not None and failed.status == "failed" and len(sent) == 1
    assert "No worker took this call within 5 s" in failed.status_message


@pytest.mark.parametrize("policy", ["requeue", "fail"])
def test_a_call_whose_worker_stopped_beating_is_requeued_or_failed(
    policy: str, beats: None, access_factory: Any, settings: Any
) -> None:
    owner = "another-host:4242:feedbeef"  # not of this host: judged by its heartbeat alone
    record = _record(access_factory(tools=("worker_job",)), status="working", owner=owner, attempts=1)
    sent: list[ToolTask] = []
    heartbeat.backend().beat(owner, [])
    assert not liveness.check(record, sent.append)  # beating: alive
    with override_settings(MCP_APP={**settings.MCP_APP, "WORKER_LOST_CALLS": policy}):
        started = time.monotonic()
        while owner not in heartbeat.dead([owner]):  # silent for a timeout (and this process healthy again)
            assert time.monotonic() - started < BOUND_SECONDS
            time.sleep(0.05)
        assert liveness.check(record, sent.append)
        assert not liveness.check(record, sent.append)  # decided once: the record moved on
    after = ToolTask.objects.get(pk=record.pk)
    if policy == "requeue":
        assert (after.status, after.owner, after.attempts) == ("queued", "", 1)
        assert after.celery_id != record.celery_id and [s.celery_id for s in sent] == [after.celery_id]
    else:
        assert after.status == "failed" and sent == [] and after.status_message == records.LOST_MESSAGE
