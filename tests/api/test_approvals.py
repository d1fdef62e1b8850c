"""``/api/v1/approvals/`` as tenant members with personal API keys: the calls waiting for a person listed and shown
with their agent, server, tool and exact arguments; approved or denied once by the tenant's admins and owners (a
second decision, or one past the expiry, is a 409; a viewer's and the agent's own OAuth user's, a 403); another
tenant's approvals invisible (not listed, 404 on read and on both decisions, nothing changed). Also
``Tool.requires_approval`` on the tool serializer. Approval rows are made here as a parked call leaves them."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mcp_app.models import Approval, Tool, ToolTask

APPROVALS = "/api/v1/approvals/"
ARGUMENTS = {"path": "/srv/reports/2026.csv", "force": True, "retries": 3}
# sha256 of the RFC 8785 canonical JSON of ARGUMENTS (keys sorted, no spaces), written out by hand.
CANONICAL = b'{"force":true,"path":"/srv/reports/2026.csv","retries":3}'


@pytest.fixture
def acme(two_tenants: Any) -> Any:
    return two_tenants[0]


@pytest.fixture
def globex(two_tenants: Any) -> Any:
    return two_tenants[1]


@pytest.fixture
def pending(acme: Any, globex: Any, approval_factory: Any) -> dict[str, Approval]:
    """One pending approval per tenant; Acme's parks a task."""
    task = ToolTask.objects.create_task(
        server=acme.server, agent=acme.agent, tool_name="delete_file", arguments=ARGUMENTS, ttl_ms=600_000
    )
    ToolTask.objects.filter(pk=task.pk).update(status=ToolTask.Status.PARKED)
    return {
        "acme": approval_factory(acme.server, acme.agent, "delete_file", ARGUMENTS, task=task),
        "globex": approval_factory(globex.server, globex.agent, "drop_table", {"table": "orders"}),
    }


def error(response: Any) -> tuple[int, str, str]:
    body = response.json()["error"]
    return response.status_code, body["code"], body["message"]


def detail(approval: Approval) -> str:
    return f"{APPROVALS}{approval.pk}/"


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_members_see_their_tenants_approvals_with_the_exact_arguments(
    acme: Any, globex: Any, key_client: Any, pending: dict[str, Approval], role: str
) -> None:
    client = key_client(acme.users[role])
    listed = client.get(APPROVALS)
    assert listed.status_code == 200
    assert {item["id"] for item in listed.json()["results"]} == {pending["acme"].pk, acme.objects["approvals"].pk}

    shown = client.get(detail(pending["acme"]))
    assert shown.status_code == 200
    body = shown.json()
    assert body == {
        **body,
        "tenant": acme.tenant.pk,
        "server": acme.server.pk,
        "server_id": "acme-server",
        "agent": acme.agent.pk,
        "agent_id": "acme-agent",
        "tool": "delete_file",
        "arguments": {"path": "/srv/reports/2026.csv", "force": True, "retries": 3},
        "arguments_digest": hashlib.sha256(CANONICAL).hexdigest(),
        "reason": "The tool requires approval.",
        "status": "pending",
        "decided_by": None,
        "decided_at": None,
        "note": "",
        "used_at": None,
        "task": pending["acme"].task.task_id,
        "task_status": "parked",
    }
    assert body["created_at"] and body["expires_at"]


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_another_tenants_approvals_are_not_found_and_cannot_be_decided(
    acme: Any, globex: Any, key_client: Any, pending: dict[str, Approval], role: str
) -> None:
    client = key_client(globex.users[role])
    theirs = pending["acme"]
    listed = client.get(f"{APPROVALS}?page_size=500")
    assert {item["id"] for item in listed.json()["results"]} == {pending["globex"].pk, globex.objects["approvals"].pk}
    assert client.get(f"{APPROVALS}?tenant={acme.tenant.pk}").json()["results"] == []
    assert client.get(f"{APPROVALS}?agent={acme.agent.pk}").json()["results"] == []
    assert error(client.get(detail(theirs)))[:2] == (404, "not_found")
    for verb in ("approve", "deny"):
        response = client.post(f"{detail(theirs)}{verb}/", {"note": "mine now"}, format="json")
        assert error(response)[:2] == (404, "not_found"), verb
    theirs.refresh_from_db()
    assert (theirs.status, theirs.decided_by, theirs.note) == ("pending", None, "")


@pytest.mark.parametrize("role", ["owner", "admin"])
def test_an_admin_approves_once_and_a_second_decision_is_a_conflict(
    acme: Any,
    key_client: Any,
    pending: dict[str, Approval],
    role: str,
    caplog: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    client = key_client(acme.users[role])
    approval = pending["acme"]
    with caplog.at_level(logging.INFO, logger="mcp_app.audit"), django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"{detail(approval)}approve/", {"note": "checked the path"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["decided_by"], body["note"]) == ("approved", f"acme-{role}", "checked the path")
    assert body["decided_at"] is not None
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.note) == ("approved", acme.users[role], "checked the path")
    # Approver and decision are in the audit log.
    audit = [r.getMessage() for r in caplog.records if r.name == "mcp_app.audit"]
    expected = f"approval {approval.pk} of tool delete_file for agent #{acme.agent.pk} approved by acme-{role}"
    assert audit == [f"{expected}: checked the path"]

    for verb in ("approve", "deny"):
        status, code, message = error(client.post(f"{detail(approval)}{verb}/", {}, format="json"))
        assert (status, code) == (409, "conflict"), verb
        assert f"already approved by acme-{role}" in message
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_an_admin_denies_without_a_note(acme: Any, key_client: Any, pending: dict[str, Approval]) -> None:
    approval = pending["acme"]
    response = key_client(acme.users["admin"]).post(f"{detail(approval)}deny/")
    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["note"]) == ("denied", "")
    approval.refresh_from_db()
    assert approval.status == "denied"


def test_a_viewer_may_not_decide(acme: Any, key_client: Any, pending: dict[str, Approval]) -> None:
    client = key_client(acme.users["viewer"])
    for verb in ("approve", "deny"):
        assert error(client.post(f"{detail(pending['acme'])}{verb}/", {}, format="json"))[:2] == (
            403,
            "permission_denied",
        )
    pending["acme"].refresh_from_db()
    assert pending["acme"].status == "pending"


def test_the_agents_own_oauth_user_may_not_decide_another_admin_may(
    acme: Any, key_client: Any, pending: dict[str, Approval], oauth_user_of: Any
) -> None:
    approval = pending["acme"]
    oauth_user_of(acme.agent, acme.users["admin"])
    status, code, message = error(
        key_client(acme.users["admin"]).post(f"{detail(approval)}approve/", {}, format="json")
    )
    assert (status, code) == (403, "permission_denied")
    assert "another admin" in message
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert key_client(acme.users["owner"]).post(f"{detail(approval)}approve/").status_code == 200


def test_an_expired_approval_reads_expired_and_cannot_be_decided(
    acme: Any, key_client: Any, approval_factory: Any
) -> None:
    late = approval_factory(acme.server, acme.agent, "delete_file", {"path": "/tmp/a"}, expires_in=-1)
    client = key_client(acme.users["admin"])
    assert client.get(detail(late)).json()["status"] == "expired"
    status, code, message = error(client.post(f"{detail(late)}approve/", {}, format="json"))
    assert (status, code) == (409, "conflict")
    assert "expired" in message
    late.refresh_from_db()
    assert (late.status, late.decided_by) == ("pending", None)  # the sweep marks it; nobody decided it


def test_the_list_filters_by_status_agent_server_and_tool(
    acme: Any, key_client: Any, pending: dict[str, Approval], approval_factory: Any, agent_factory: Any
) -> None:
    other_agent = agent_factory(tenant=acme.tenant, agent_id="acme-other")
    late = approval_factory(acme.server, acme.agent, "delete_file", {"path": "/tmp/a"}, expires_in=-1)
    denied = approval_factory(acme.server, other_agent, "rotate_keys", {}, status="denied")
    client = key_client(acme.users["viewer"])

    def ids(query: str) -> set[int]:
        response = client.get(f"{APPROVALS}?{query}")
        assert response.status_code == 200, response.content
        return {item["id"] for item in response.json()["results"]}

    assert ids("status=pending") == {pending["acme"].pk, acme.objects["approvals"].pk}
    assert ids("status=expired") == {late.pk}
    assert ids("status=denied") == {denied.pk}
    assert ids(f"agent={other_agent.pk}") == {denied.pk}
    assert ids(f"server={acme.server.pk}&tool=delete_file") == {pending["acme"].pk, late.pk}
    assert error(client.get(f"{APPROVALS}?status=maybe"))[:2] == (400, "validation_error")


def test_approvals_are_read_only_but_for_their_decision(
    acme: Any, key_client: Any, pending: dict[str, Approval]
) -> None:
    client = key_client(acme.users["owner"])
    url = detail(pending["acme"])
    assert client.patch(url, {"note": "x"}, format="json").status_code == 405
    assert client.delete(url).status_code == 405
    assert client.post(APPROVALS, {"tool_name": "x"}, format="json").status_code == 405
    assert error(client.post(f"{url}approve/", {"note": "x" * 501}, format="json"))[:2] == (400, "validation_error")
    pending["acme"].refresh_from_db()
    assert pending["acme"].status == "pending"


def test_requires_approval_is_set_on_the_tool(acme: Any, globex: Any, key_client: Any) -> None:
    client = key_client(acme.users["admin"])
    url = f"/api/v1/tools/{acme.tool.pk}/"
    assert client.get(url).json()["requires_approval"] is None  # the default rule
    for value in (True, False, None):
        response = client.patch(url, {"requires_approval": value}, format="json")
        assert response.status_code == 200, response.content
        assert response.json()["requires_approval"] is value
        assert Tool.objects.get(pk=acme.tool.pk).requires_approval is value
    created = client.post(
        "/api/v1/tools/",
        {"name": "wipe", "static_result": {"content": []}, "requires_approval": True, "tenant": acme.tenant.pk},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert Tool.objects.get(pk=created.json()["id"]).requires_approval is True
    foreign = client.patch(f"/api/v1/tools/{globex.tool.pk}/", {"requires_approval": True}, format="json")
    assert foreign.status_code == 404
    assert Tool.objects.get(pk=globex.tool.pk).requires_approval is None


def test_the_list_costs_the_same_queries_for_one_approval_or_many(
    acme: Any, key_client: Any, approval_factory: Any, pending: dict[str, Approval]
) -> None:
    client = key_client(acme.users["viewer"])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(APPROVALS).status_code == 200
        return len(captured)

    queries()  # the key's first use writes its last-used stamp
    few = queries()
    for n in range(5):
        approval_factory(acme.server, acme.agent, "wipe", {"n": n}, status="denied", decided_by=acme.users["admin"])
    assert queries() == few
