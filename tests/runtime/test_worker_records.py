"""The durable record of worker calls (``ToolTask.objects``' worker verbs): taking a call on a worker per the loss
policy, the reaper, idempotency keys, and that the serving process's orphan recovery leaves worker calls alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from mcp_app.models import ToolTask
from mcp_app.runtime import durable
from mcp_app.workers import records
from mcp_app.workers.running import reaper

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair(server_factory: Any, agent_factory: Any) -> tuple[Any, Any]:
    server = server_factory()
    return server, agent_factory(tenant=server.tenant)


def make(pair: tuple[Any, Any], key: str = "", timeout: float = 60, tool: str = "job") -> tuple[ToolTask, bool]:
    server, agent = pair
    return ToolTask.objects.create_worker_call(
        task_id=records.new_task_id(),
        server_pk=server.pk,
        agent_pk=agent.pk,
        tool_name=tool,
        arguments={"a": 1},
        timeout=timeout,
        client_capabilities={},
        protocol_version="2026-07-28",
        request_id=3,
        idempotency_key=key,
    )


def test_a_new_record_is_queued_with_its_celery_id_and_deadline(pair: Any) -> None:
    before = timezone.now()
    record, created = make(pair, timeout=30)
    assert created and record.status == "queued" and record.execution == "worker" and not record.client_task
    assert record.celery_id and record.request_id == "3" and record.attempts == 0
    assert before + timedelta(seconds=29) < record.deadline <= timezone.now() + timedelta(seconds=30)


def test_a_worker_takes_a_queued_record_once(pair: Any) -> None:
    record, _ = make(pair)
    taken, verdict = ToolTask.objects.begin(record.pk, record.celery_id, "host:1:boot", lost=records.lost)
    assert verdict == "run" and taken.status == "working" and taken.attempts == 1 and taken.owner == "host:1:boot"
    assert ToolTask.objects.begin(record.pk, "another-celery-id", "host:2:boot", lost=records.lost)[1] == "superseded"


@pytest.mark.parametrize(
    ("policy", "attempts_before", "verdict", "status"),
    [("requeue", 1, "run", "working"), ("requeue", 2, "lost", "failed"), ("fail", 1, "lost", "failed")],
)
def test_a_redelivered_message_of_a_lost_worker_follows_the_policy(
    pair: Any, settings: Any, policy: str, attempts_before: int, verdict: str, status: str
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_LOST_CALLS": policy, "WORKER_CALL_MAX_ATTEMPTS": 2}
    record, _ = make(pair)
    ToolTask.objects.filter(pk=record.pk).update(status="working", attempts=attempts_before)
    taken, got = ToolTask.objects.begin(record.pk, record.celery_id, "host:3:boot", lost=records.lost)
    assert (got, taken.status) == (verdict, status)
    if status == "failed":
        assert taken.error["message"] == records.LOST_MESSAGE and taken.finished_at is not None
    else:
        assert taken.attempts == attempts_before + 1


def test_a_cancelled_record_is_not_run_and_its_outcome_is_not_overwritten(pair: Any) -> None:
    record, _ = make(pair)
    assert ToolTask.objects.cancel(record.pk)
    assert ToolTask.objects.begin(record.pk, record.celery_id, "h:1:b", lost=records.lost)[1] == "terminal"
    assert not ToolTask.objects.store(record.pk, durable.columns({"content": []}))
    assert ToolTask.objects.get(pk=record.pk).status == "cancelled"


def test_the_reaper_fails_only_worker_calls_past_their_deadline(pair: Any) -> None:
    overdue, _ = make(pair)
    fresh, _ = make(pair)
    finished, _ = make(pair)
    ToolTask.objects.store(finished.pk, durable.columns({"content": []}))
    past = timezone.now() - timedelta(seconds=1)
    ToolTask.objects.filter(pk__in=[overdue.pk, finished.pk]).update(deadline=past)
    server, agent = pair
    inline = ToolTask.objects.create_task(
        server=server, agent=agent, tool_name="t", arguments={}, ttl_ms=60_000, status="working"
    )
    assert reaper.fail_overdue(dry_run=True) == 1
    assert reaper.fail_overdue() == 1
    statuses = dict(ToolTask.objects.values_list("pk", "status"))
    assert statuses == {overdue.pk: "failed", fresh.pk: "queued", finished.pk: "completed", inline.pk: "working"}
    assert ToolTask.objects.get(pk=overdue.pk).error["code"] == -32001


def test_the_reaper_also_deletes_expired_records(pair: Any) -> None:
    record, _ = make(pair)
    ToolTask.objects.store(record.pk, durable.columns({"content": []}))
    ToolTask.objects.filter(pk=record.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.reap() == {"worker calls past their deadline": 0, "expired tasks": 1}


def test_orphan_recovery_of_the_serving_process_leaves_worker_calls_to_their_worker(pair: Any) -> None:
    record, _ = make(pair)
    ToolTask.objects.filter(pk=record.pk).update(status="working", owner="host:1:boot")
    server, agent = pair
    inline = ToolTask.objects.create_task(
        server=server, agent=agent, tool_name="t", arguments={}, ttl_ms=60_000, status="working", owner="host:2:boot"
    )
    assert ToolTask.objects.fail_orphaned(lambda owner: True) == 1
    assert ToolTask.objects.get(pk=inline.pk).status == "failed"
    assert ToolTask.objects.get(pk=record.pk).status == "working"


def test_an_idempotency_key_finds_the_first_record_within_its_ttl(pair: Any, settings: Any) -> None:
    first, created = make(pair, key="k")
    again, created_again = make(pair, key="k")
    assert created and not created_again and again.pk == first.pk
    other, created_other = make(pair, key="k", tool="another")
    assert created_other and other.pk != first.pk  # the key now names the other tool's call
    settings.MCP_APP = {**settings.MCP_APP, "IDEMPOTENCY_TTL_SECONDS": 0}
    renewed, created_renewed = make(pair, key="k", tool="another")
    assert created_renewed and renewed.pk != other.pk
    assert ToolTask.objects.filter(idempotency_key="k").count() == 1
