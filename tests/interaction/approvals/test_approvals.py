"""Calls that wait for a tenant admin's approval (issue 28), at the wire, through the real consumer in-process: a
2026-07-28 client declaring tasks gets a parked task that completes once approved (or ends with an error result
once denied); a 2025-11-25 client asking for a task likewise; a client that cannot take a task waits a bounded time
and gets -32014 with the approval's id; an approval is used once, for its own arguments and agent, before its
expiry, and is never decided by the person the agent acts for; the warm call of a tool that needs no approval
still runs no query and no thread hop. Expected digests are computed here from the RFC 8785 text, not by the code
under test.
"""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import tests.tools
from mcp_app.models import Approval, ServerTool, Tool, ToolTask
from mcp_app.operations import DecisionRefused, decide_approval
from mcp_app.protocol.errors import APPROVAL_PENDING, CAPACITY_EXCEEDED
from tests.helpers import (
    LEGACY,
    call,
    error_of,
    modern_call_tool,
    open_session,
    result_of,
    rpc,
    settled,
    task,
    task_call_tool,
    tool_call,
    wait_until,
)
from tests.request_path import assert_warm_call_is_free

ALPHA = {"kind": "alpha"}
# sha256 of the RFC 8785 canonical JSON of ALPHA, written out by hand.
ALPHA_DIGEST = hashlib.sha256(b'{"kind":"alpha"}').hexdigest()
WAIT = 0.6  # APPROVAL_WAIT_SECONDS in these tests


@pytest.fixture(autouse=True)
def _short_wait(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "APPROVAL_WAIT_SECONDS": WAIT}


@pytest.fixture(autouse=True)
def _fresh_executions() -> Any:
    tests.tools.executions.clear()
    yield
    tests.tools.executions.clear()


@pytest.fixture
async def gated(make_access: Any, orm: Any) -> Any:
    """A server whose ``record`` tool requires approval (and whose ``async_echo`` does not)."""
    access = await make_access(tools=("record", "async_echo", "gated_job"))
    await orm(
        Tool.objects.filter(tenant=access.tenant, name__in=("record", "gated_job")).update, requires_approval=True
    )
    return access


@pytest.fixture
def admin_of(member_factory: Any, orm: Any) -> Any:
    """A new admin of ``tenant`` (a user with that role alone)."""

    async def make(tenant: Any, role: str = "admin") -> Any:
        return await orm(member_factory, (tenant, role))

    return make


async def _decide(orm: Any, approval_id: int, user: Any, *, approve: bool, note: str = "") -> bool:
    approval = await orm(Approval.objects.get, pk=approval_id)
    decided: bool = await orm(Approval.objects.decide, approval, user=user, approve=approve, note=note)
    return decided


def _legacy_record(arguments: dict[str, Any], id: int = 1, **params: Any) -> dict[str, Any]:
    return rpc("tools/call", {"name": "record", "arguments": arguments, **params}, id=id)


async def _pending(access: Any, arguments: dict[str, Any] = ALPHA) -> dict[str, Any]:
    """A handshake-era call without a task: refused after the bound with -32014; its error."""
    reply = await call(access, _legacy_record(arguments), headers={"mcp-protocol-version": LEGACY})
    return error_of(reply, 200, APPROVAL_PENDING)


async def _ran(access: Any, arguments: dict[str, Any] = ALPHA) -> dict[str, Any]:
    reply = await call(access, _legacy_record(arguments), headers={"mcp-protocol-version": LEGACY})
    return result_of(reply)


# ------------------------------------------------------------------------------ 2026-07-28 with tasks


async def test_a_declaring_client_gets_a_parked_task_that_completes_once_approved(gated, orm, admin_of):
    created = result_of(await task_call_tool(gated, "record", ALPHA))
    assert (created["resultType"], created["status"]) == ("task", "working")
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert created["statusMessage"] == f"Waiting for approval {approval.pk}"
    assert (approval.status, approval.tool_name, approval.agent_id, approval.server_id) == (
        "pending",
        "record",
        gated.agent.pk,
        gated.server.pk,
    )
    assert approval.arguments == ALPHA and approval.arguments_digest == ALPHA_DIGEST
    assert (approval.expires_at - approval.created_at) == timedelta(days=1)
    waiting = result_of(await task(gated, "tasks/get", created["taskId"]))
    assert (waiting["status"], waiting["statusMessage"]) == ("working", created["statusMessage"])
    assert tests.tools.executions == []  # nothing runs before a person says so

    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=True)

    async def completed() -> dict[str, Any] | None:
        got = result_of(await task(gated, "tasks/get", created["taskId"]))
        return got if got["status"] == "completed" else None

    done = await wait_until(completed, what="the approved task to complete")
    assert done["result"]["content"] == [{"type": "text", "text": "alpha x1"}]
    assert tests.tools.executions == [("record", {"kind": "alpha", "count": 1})]
    await settled()
    used = await orm(Approval.objects.get, pk=approval.pk)
    assert used.status == "used" and used.used_at is not None


async def test_a_denied_task_ends_with_an_error_result_naming_the_approver(gated, orm, admin_of):
    created = result_of(await task_call_tool(gated, "record", ALPHA))
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    admin = await admin_of(gated.tenant)
    assert await _decide(orm, approval.pk, admin, approve=False, note="not on a Friday")

    async def ended() -> dict[str, Any] | None:
        got = result_of(await task(gated, "tasks/get", created["taskId"]))
        return got if got["status"] == "completed" else None

    done = await wait_until(ended, what="the denied task to end")
    assert done["result"]["isError"] is True
    text = done["result"]["content"][0]["text"]
    assert admin.username in text and "denied" in text and "not on a Friday" in text
    assert tests.tools.executions == []
    await settled()
    # Decided once: neither approved afterwards nor denied again.
    assert not await _decide(orm, approval.pk, admin, approve=True)


async def test_the_same_call_reissued_while_parked_gets_the_same_task(gated, orm, admin_of):
    first = result_of(await task_call_tool(gated, "record", ALPHA))
    again = result_of(await task_call_tool(gated, "record", {"kind": "alpha"}))
    assert again["taskId"] == first["taskId"]
    assert await orm(Approval.objects.filter(tenant=gated.tenant).count) == 1
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=False)
    await settled()


async def test_a_cancelled_parked_task_stays_cancelled_and_never_runs(gated, orm, admin_of):
    created = result_of(await task_call_tool(gated, "record", ALPHA))
    result_of(await task(gated, "tasks/cancel", created["taskId"]))
    await settled()
    assert result_of(await task(gated, "tasks/get", created["taskId"]))["status"] == "cancelled"
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=True)
    assert result_of(await task(gated, "tasks/get", created["taskId"]))["status"] == "cancelled"
    assert tests.tools.executions == []


async def test_the_sweep_ends_a_parked_task_whose_approval_expired(gated, orm):
    from mcp_app.runtime.decisions import expire_approvals

    created = result_of(await task_call_tool(gated, "record", ALPHA))
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    await orm(Approval.objects.filter(pk=approval.pk).update, expires_at=timezone.now() - timedelta(seconds=1))
    assert await orm(expire_approvals) == 1
    await settled()  # the parked work was stopped: nothing waits any more
    ended = result_of(await task(gated, "tasks/get", created["taskId"]))
    assert ended["status"] == "completed" and ended["result"]["isError"] is True
    assert "expired" in ended["result"]["content"][0]["text"]
    assert (await orm(Approval.objects.get, pk=approval.pk)).status == "expired"
    assert tests.tools.executions == []


async def test_parked_tasks_count_against_the_inline_task_cap(gated, orm, admin_of, settings):
    settings.MCP_APP = {**settings.MCP_APP, "INLINE_TASKS_PER_AGENT": 1}
    first = result_of(await task_call_tool(gated, "record", ALPHA))
    refused = error_of(await task_call_tool(gated, "record", {"kind": "beta"}), 200, CAPACITY_EXCEEDED)
    assert refused["data"] == {"resource": "inline tasks", "scope": "agent", "limit": 1}
    approval = await orm(Approval.objects.get, task__task_id=first["taskId"])
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=False)
    await settled()


async def test_a_worker_tool_runs_on_a_worker_as_its_parked_record(gated, orm, admin_of, settings):
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}
    await orm(ServerTool.objects.filter(server=gated.server, tool__name="record").update, execution="worker")
    created = result_of(await task_call_tool(gated, "record", ALPHA))
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=True)

    async def completed() -> dict[str, Any] | None:
        got = result_of(await task(gated, "tasks/get", created["taskId"]))
        return got if got["status"] == "completed" else None

    done = await wait_until(completed, what="the approved worker call to complete")
    assert done["result"]["content"] == [{"type": "text", "text": "alpha x1"}]
    await settled()
    rows = await orm(lambda: list(ToolTask.objects.values_list("task_id", "execution")))
    assert rows == [(created["taskId"], "worker")]  # one row: the parked record became the worker call


# ------------------------------------------------------------------------------ 2025-11-25 tasks


async def test_a_handshake_task_is_parked_then_its_result_is_the_tools(gated, orm, admin_of, fresh_gate):
    session = await open_session(gated, "2025-11-25")
    headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    reply = await call(gated, rpc("tools/call", {"name": "gated_job", "task": {"ttl": 60_000}}), headers=headers)
    created = result_of(reply)["task"]
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert (created["status"], created["statusMessage"]) == ("working", f"Waiting for approval {approval.pk}")
    got = result_of(await call(gated, rpc("tasks/get", {"taskId": created["taskId"]}), headers=headers))
    assert got["status"] == "working"
    await wait_until(
        lambda: orm(Approval.objects.filter(pk=approval.pk, task__task_id=created["taskId"]).exists),
        what="the approval to name its parked task",
    )
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=True)
    await wait_until(fresh_gate.gate.started.is_set, what="the approved call to start")
    fresh_gate.gate.release.set()
    answer = await call(gated, rpc("tasks/result", {"taskId": created["taskId"]}), headers=headers, timeout=10)
    body = answer.sse_messages()[-1] if answer.content_type.startswith("text/event-stream") else answer.json()
    assert body["result"]["content"] == [{"type": "text", "text": "gated done"}]
    await settled()


async def test_a_denied_handshake_task_fails_with_the_error_result(gated, orm, admin_of):
    session = await open_session(gated, "2025-11-25")
    headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    reply = await call(gated, rpc("tools/call", {"name": "gated_job", "task": {}}), headers=headers)
    created = result_of(reply)["task"]
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=False)
    answer = await call(gated, rpc("tasks/result", {"taskId": created["taskId"]}), headers=headers, timeout=10)
    body = answer.sse_messages()[-1] if answer.content_type.startswith("text/event-stream") else answer.json()
    assert body["result"]["isError"] is True and "denied" in body["result"]["content"][0]["text"]
    got = result_of(await call(gated, rpc("tasks/get", {"taskId": created["taskId"]}), headers=headers))
    assert got["status"] == "failed"
    await settled()


# ------------------------------------------------------------------------------ clients without tasks


async def test_a_client_without_tasks_gets_the_pending_error_within_the_bound(gated, orm):
    started = time.monotonic()
    error = await _pending(gated)
    elapsed = time.monotonic() - started
    assert WAIT <= elapsed <= WAIT + 2.0
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert error["data"]["approvalId"] == approval.pk
    assert error["data"]["expiresAt"].startswith(approval.expires_at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert "taskId" not in error["data"]
    assert "approval" in error["message"] and "re-issue" in error["message"]
    # The same call again reuses the pending request: one per binding.
    assert (await _pending(gated))["data"]["approvalId"] == approval.pk
    assert tests.tools.executions == []


async def test_a_modern_client_without_the_extension_gets_the_pending_error(gated, orm):
    reply = await modern_call_tool(gated, "record", ALPHA)
    error = error_of(reply, 200, APPROVAL_PENDING)
    approval = await orm(Approval.objects.get, tenant=gated.tenant)
    assert error["data"]["approvalId"] == approval.pk


async def test_a_call_approved_while_it_waits_runs_at_once(gated, orm, admin_of, settings):
    settings.MCP_APP = {**settings.MCP_APP, "APPROVAL_WAIT_SECONDS": 20}
    import asyncio

    waiting = asyncio.ensure_future(_ran(gated))
    approval = await wait_until(
        lambda: orm(Approval.objects.filter(tenant=gated.tenant).first), what="the approval request"
    )
    started = time.monotonic()
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=True)
    result = await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < 5  # woken by the decision, not by the end of the wait
    assert result["content"] == [{"type": "text", "text": "alpha x1"}]
    assert (await orm(Approval.objects.get, pk=approval.pk)).status == "used"


async def test_an_approval_is_used_once_then_a_new_request_is_made(gated, orm, admin_of):
    first = (await _pending(gated))["data"]["approvalId"]
    assert await _decide(orm, first, await admin_of(gated.tenant), approve=True)
    assert (await _ran(gated))["content"] == [{"type": "text", "text": "alpha x1"}]
    assert tests.tools.executions == [("record", {"kind": "alpha", "count": 1})]
    second = (await _pending(gated))["data"]["approvalId"]
    assert second != first
    assert tests.tools.executions == [("record", {"kind": "alpha", "count": 1})]  # ran once


async def test_an_approval_covers_neither_other_arguments_nor_another_agent(gated, orm, admin_of, agent_access):
    approved = (await _pending(gated))["data"]["approvalId"]
    assert await _decide(orm, approved, await admin_of(gated.tenant), approve=True)
    other_arguments = (await _pending(gated, {"kind": "beta"}))["data"]["approvalId"]
    other_agent = (await _pending(await orm(agent_access, gated)))["data"]["approvalId"]
    assert len({approved, other_arguments, other_agent}) == 3
    assert tests.tools.executions == []
    assert (await _ran(gated))["content"][0]["text"] == "alpha x1"


async def test_another_tenants_agent_is_not_covered_nor_can_its_admin_decide(gated, orm, admin_of, make_access):
    # Tenant B has the same tool, gated, on a server of its own: the same call with the same arguments.
    other = await make_access(tools=("record",))
    await orm(Tool.objects.filter(tenant=other.tenant, name="record").update, requires_approval=True)
    approved = (await _pending(gated))["data"]["approvalId"]
    with pytest.raises(DecisionRefused, match="Only the tenant's admins"):  # B's admin
        approval = await orm(Approval.objects.get, pk=approved)
        await orm(decide_approval, approval, user=await admin_of(other.tenant), approve=True)
    assert await _decide(orm, approved, await admin_of(gated.tenant), approve=True)
    theirs = (await _pending(other))["data"]["approvalId"]  # A's approval does not cover B's agent
    assert theirs != approved
    assert tests.tools.executions == []
    assert (await _ran(gated))["content"][0]["text"] == "alpha x1"


async def test_the_binding_is_the_canonical_json_of_the_arguments(gated, orm, admin_of):
    approved = (await _pending(gated, {"kind": "beta", "count": 2}))["data"]["approvalId"]
    row = await orm(Approval.objects.get, pk=approved)
    assert row.arguments_digest == hashlib.sha256(b'{"count":2,"kind":"beta"}').hexdigest()
    assert await _decide(orm, approved, await admin_of(gated.tenant), approve=True)
    # Key order is not part of the arguments: the same call, written the other way round, is covered.
    assert (await _ran(gated, {"count": 2, "kind": "beta"}))["content"][0]["text"] == "beta x2"


async def test_an_expired_approval_is_refused(gated, orm, admin_of):
    approved = (await _pending(gated))["data"]["approvalId"]
    assert await _decide(orm, approved, await admin_of(gated.tenant), approve=True)
    await orm(Approval.objects.filter(pk=approved).update, expires_at=timezone.now() - timedelta(seconds=1))
    renewed = (await _pending(gated))["data"]["approvalId"]
    assert renewed != approved
    assert (await orm(Approval.objects.get, pk=approved)).status == "expired"
    assert tests.tools.executions == []
    # A pending request past its expiry can no longer be decided.
    await orm(Approval.objects.filter(pk=renewed).update, expires_at=timezone.now() - timedelta(seconds=1))
    assert not await _decide(orm, renewed, await admin_of(gated.tenant), approve=True)


async def test_a_denied_call_reissued_ends_with_an_error_result_while_waiting(gated, orm, admin_of, settings):
    settings.MCP_APP = {**settings.MCP_APP, "APPROVAL_WAIT_SECONDS": 20}
    import asyncio

    waiting = asyncio.ensure_future(_ran(gated))
    approval = await wait_until(
        lambda: orm(Approval.objects.filter(tenant=gated.tenant).first), what="the approval request"
    )
    assert await _decide(orm, approval.pk, await admin_of(gated.tenant), approve=False, note="no")
    result = await asyncio.wait_for(waiting, 10)
    assert result["isError"] is True and "denied" in result["content"][0]["text"]
    assert tests.tools.executions == []


async def test_the_person_the_agent_acts_for_cannot_approve(gated, orm, admin_of):
    from oauth2_provider.models import Application

    from mcp_app.models import OAuthAgent

    approval_id = (await _pending(gated))["data"]["approvalId"]
    user = await admin_of(gated.tenant)
    application = await orm(
        Application.objects.create,
        name="client",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1/cb",
    )
    await orm(OAuthAgent.objects.create, agent=gated.agent, tenant=gated.tenant, user=user, application=application)
    assert not await _decide(orm, approval_id, user, approve=True)
    assert (await orm(Approval.objects.get, pk=approval_id)).status == "pending"
    assert await _decide(orm, approval_id, await admin_of(gated.tenant), approve=True)


async def test_invalid_arguments_are_refused_before_anyone_is_asked(gated, orm):
    reply = await call(gated, _legacy_record({"kind": "gamma"}), headers={"mcp-protocol-version": LEGACY})
    assert result_of(reply)["isError"] is True  # 2025-11-25: invalid arguments are a tool error result
    assert not await orm(Approval.objects.filter(tenant=gated.tenant).exists)


# ------------------------------------------------------------------------------ what the gate costs the rest


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_the_warm_call_of_a_tool_without_approval_runs_no_query_and_no_hop(era, gated, monkeypatch, settings):
    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}
    body, headers = tool_call(era, "async_echo", "hi")
    await assert_warm_call_is_free(monkeypatch, gated, body, headers)


def test_parked_records_count_as_their_process_s_work(db, access_factory):
    """A parked call waits in its process: when that process dies, orphan recovery fails it."""
    access = access_factory(tools=("record",))
    parked = ToolTask.objects.create_task(
        tool_name="record", arguments={}, ttl_ms=60_000, server=access.server, agent=access.agent, status="parked"
    )
    ToolTask.objects.filter(pk=parked.pk).update(owner="gone-host:1:1")
    assert ToolTask.objects.fail_orphaned(lambda owner: owner == "gone-host:1:1") == 1
    assert ToolTask.objects.get(pk=parked.pk).status == "failed"
