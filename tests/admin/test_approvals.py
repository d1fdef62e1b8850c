"""Approvals in the admin: Globex's staff see only Globex's approvals (Acme's: 404 on the page and on the decision,
absent from the list and the sidebar's count), pending ones first; an approval's page shows the agent, server, tool,
the exact arguments as indented JSON, the reason and the expiry; the tenant's admins and owners approve or deny it
once with an optional note (a POST with CSRF; a message for each outcome), viewers and the agent's own OAuth user
never; decided ones say who and when. Also ``Tool.requires_approval`` on the tool's page."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from mcp_app.models import Approval, Tool, ToolTask

ARGUMENTS = {"path": "/srv/reports/2026.csv", "force": True, "options": {"keep": ["a<b>", "é"]}}


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mcp_app_{model}_{view}", args=args)


def decide_url(approval: Approval) -> str:
    return reverse("admin:mcp_app_approval_decide", args=[approval.pk])


def text(response: Any) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


def said(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.fixture
def approvals(acme: Any, globex: Any, approval_factory: Any) -> dict[str, Approval]:
    task = ToolTask.objects.create_task(
        server=globex.access.server, agent=globex.access.agent, tool_name="delete_file", arguments=ARGUMENTS, ttl_ms=1
    )
    return {
        "acme": approval_factory(acme.access.server, acme.access.agent, "drop_table", {"table": "orders"}),
        "globex": approval_factory(globex.access.server, globex.access.agent, "delete_file", ARGUMENTS, task=task),
    }


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_staff_see_and_decide_only_their_tenants_approvals(
    acme: Any, globex: Any, login: Any, approvals: dict[str, Approval], role: str
) -> None:
    client = login(globex.users[role])
    page = client.get(url("approval", "changelist"))
    assert page.status_code == 200
    content = page.content.decode()
    assert url("approval", "change", approvals["globex"].pk) in content
    assert url("approval", "change", approvals["acme"].pk) not in content
    assert "drop_table" not in content and "acme" not in content.lower()
    theirs = approvals["acme"]
    assert client.get(url("approval", "change", theirs.pk)).status_code == 404
    for decision in ("approve", "deny"):
        assert client.post(decide_url(theirs), {"decision": decision, "note": "mine"}).status_code == 404
    assert client.post(url("approval", "delete", theirs.pk), {"post": "yes"}).status_code == 404
    theirs.refresh_from_db()
    assert (theirs.status, theirs.decided_by, theirs.note) == ("pending", None, "")


def test_the_page_shows_the_call_and_the_decision_form(globex: Any, login: Any, approvals: dict[str, Approval]) -> None:
    approval = approvals["globex"]
    page = login(globex.users["admin"]).get(url("approval", "change", approval.pk))
    assert page.status_code == 200
    content = page.content.decode()
    shown = text(page)
    for expected in ("globex-server", "delete_file", "The tool requires approval.", approval.task.task_id):
        assert expected in shown, expected
    assert globex.access.agent.agent_id in shown
    # The exact arguments, indented, escaped in the page and equal once read back.
    block = re.search(r'<pre class="mcp-block mcp-approval-arguments">(.*?)</pre>', content, re.S)
    assert block is not None
    assert "a&lt;b&gt;" in block.group(1)
    assert json.loads(html.unescape(block.group(1))) == {
        "force": True,
        "options": {"keep": ["a<b>", "é"]},
        "path": "/srv/reports/2026.csv",
    }
    assert '\n  "force": true,' in html.unescape(block.group(1))
    # The decision form: a POST to the decide URL with a CSRF token, a note, and the two buttons.
    form = re.search(r'<form method="post" action="([^"]+)" id="mcp-approval-decision".*?</form>', content, re.S)
    assert form is not None and form.group(1) == decide_url(approval)
    assert 'name="csrfmiddlewaretoken"' in form.group(0)
    assert 'name="note"' in form.group(0)
    assert re.search(r'name="decision"\s+value="approve"', form.group(0))
    assert re.search(r'name="decision"\s+value="deny"', form.group(0))
    # Read-only otherwise: no save button, no delete link.
    assert 'name="_save"' not in content
    assert url("approval", "delete", approval.pk) not in content


def test_an_admin_approves_with_a_note_once(globex: Any, login: Any, approvals: dict[str, Approval]) -> None:
    approval = approvals["globex"]
    client = login(globex.users["admin"])
    response = client.post(decide_url(approval), {"decision": "approve", "note": "  path checked  "})
    assert response.status_code == 302 and response["Location"] == url("approval", "change", approval.pk)
    assert said(response) == [f"delete_file by {globex.access.agent.agent_id} approved: the call runs, once."]
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.note) == ("approved", globex.users["admin"], "path checked")

    # Decided: the page says who and when, and offers no form; a second decision is refused with a message.
    page = client.get(url("approval", "change", approval.pk))
    assert 'id="mcp-approval-decision"' not in page.content.decode()
    assert "globex-admin" in text(page) and "Approved" in text(page)
    again = client.post(decide_url(approval), {"decision": "deny"})
    assert again.status_code == 302
    (message,) = said(again)
    assert f"Approval {approval.pk} was already approved by globex-admin" in message
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_an_owner_denies(globex: Any, login: Any, approvals: dict[str, Approval]) -> None:
    approval = approvals["globex"]
    response = login(globex.users["owner"]).post(decide_url(approval), {"decision": "deny"})
    assert said(response) == [f"delete_file by {globex.access.agent.agent_id} denied: the call ends with an error."]
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.note) == ("denied", globex.users["owner"], "")


def test_a_decision_needs_the_csrf_token(globex: Any, approvals: dict[str, Approval]) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(globex.users["admin"])
    approval = approvals["globex"]
    assert client.post(decide_url(approval), {"decision": "approve"}).status_code == 403
    assert client.get(decide_url(approval)).status_code == 405  # a decision is never a GET
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_a_viewer_reads_but_never_decides(globex: Any, login: Any, approvals: dict[str, Approval]) -> None:
    client = login(globex.users["viewer"])
    approval = approvals["globex"]
    page = client.get(url("approval", "change", approval.pk))
    assert page.status_code == 200
    assert 'id="mcp-approval-decision"' not in page.content.decode()
    assert "Waiting for one of the tenant's admins" in text(page)
    assert client.post(decide_url(approval), {"decision": "approve"}).status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_agents_own_oauth_user_is_refused(
    globex: Any, login: Any, approvals: dict[str, Approval], oauth_user_of: Any
) -> None:
    approval = approvals["globex"]
    oauth_user_of(globex.access.agent, globex.users["admin"])
    client = login(globex.users["admin"])
    page = client.get(url("approval", "change", approval.pk))
    assert 'id="mcp-approval-decision"' not in page.content.decode()
    assert "This agent acts for you" in text(page)
    response = client.post(decide_url(approval), {"decision": "approve"})
    assert said(response) == [
        "You are the user this agent acts for: another admin of the tenant must decide its calls."
    ]
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_an_expired_approval_is_refused(globex: Any, login: Any, approval_factory: Any) -> None:
    late = approval_factory(globex.access.server, globex.access.agent, "delete_file", {}, expires_in=-1)
    client = login(globex.users["admin"])
    assert 'id="mcp-approval-decision"' not in client.get(url("approval", "change", late.pk)).content.decode()
    (message,) = said(client.post(decide_url(late), {"decision": "approve"}))
    assert message.startswith(f"Approval {late.pk} expired at ") and "can no longer be decided" in message
    late.refresh_from_db()
    assert late.decided_by is None


def test_pending_approvals_come_first_and_the_sidebar_counts_them(
    acme: Any, globex: Any, login: Any, approvals: dict[str, Approval], approval_factory: Any
) -> None:
    server, agent = globex.access.server, globex.access.agent
    decided = approval_factory(server, agent, "rotate_keys", {}, status="denied")  # newer than the pending one
    late = approval_factory(server, agent, "wipe", {}, expires_in=-1)  # pending, but past its expiry
    approval_factory(acme.access.server, acme.access.agent, "drop_table", {"table": "users"})  # Acme's: not counted
    client = login(globex.users["viewer"])
    content = client.get(url("approval", "changelist")).content.decode()
    links = [int(pk) for pk in re.findall(r'href="/admin/mcp_app/approval/(\d+)/change/', content)]
    waiting = [approvals["globex"].pk, globex["approval"].pk]  # newest first, before the newer decided ones
    assert links == [*waiting, late.pk, decided.pk]

    def badge() -> list[str]:
        index = client.get(reverse("admin:index")).content.decode()
        entry = re.search(r'href="/admin/mcp_app/approval/".*?</a>', index, re.S)
        assert entry is not None
        return re.findall(r">\s*(\d+)\s*</span>", entry.group(0))

    assert badge() == ["2"]
    Approval.objects.filter(pk__in=waiting).update(status="approved")
    assert badge() == []


def _change_form_data(response: Any) -> dict[str, Any]:
    """What the tool's change page would post unchanged."""
    form = response.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        if field.disabled:
            continue
        value = form[name].value()
        data[name] = "" if value is None else value
    return data


@pytest.mark.parametrize(("posted", "stored"), [("true", True), ("false", False), ("unknown", None)])
def test_requires_approval_is_edited_on_the_tools_page(
    globex: Any, login: Any, posted: str, stored: bool | None
) -> None:
    client = login(globex.users["admin"])
    tool = globex["tool"]
    page = client.get(url("tool", "change", tool.pk))
    select = re.search(r'<select name="requires_approval".*?</select>', page.content.decode(), re.S)
    assert select is not None
    options = re.findall(r'<option value="(\w+)"[^>]*>([^<]+)</option>', select.group(0))
    assert [value for value, _ in options] == ["unknown", "true", "false"]
    assert options[0][1].startswith("Default rule")
    data = {**_change_form_data(page), "requires_approval": posted}
    data.update({f"webhook-{key}": value for key, value in {"TOTAL_FORMS": 0, "INITIAL_FORMS": 0}.items()})
    response = client.post(url("tool", "change", tool.pk), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Tool.objects.get(pk=tool.pk).requires_approval is stored


def test_an_upstream_tool_offers_requires_approval_beside_its_read_only_definition(globex: Any, login: Any) -> None:
    tool = Tool.objects.create(
        tenant=globex.tenant,
        name="globex_drop_table",
        kind=Tool.Kind.UPSTREAM,
        upstream=globex["upstream"],
        remote_name="drop_table",
        annotations={"destructiveHint": True},
    )
    page = login(globex.users["admin"]).get(url("tool", "change", tool.pk)).content.decode()
    assert re.search(r'<select name="requires_approval"', page)
    assert not re.search(r'<textarea name="input_schema"', page)  # the upstream's, shown read-only


def test_the_list_costs_the_same_queries_for_one_approval_or_many(
    globex: Any, login: Any, approval_factory: Any
) -> None:
    client = login(globex.users["admin"])
    server, agent = globex.access.server, globex.access.agent

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url("approval", "changelist")).status_code == 200
        return len(captured)

    approval_factory(server, agent, "wipe", {"n": 0}, status="denied", decided_by=globex.users["owner"])
    few = queries()
    for n in range(1, 6):
        approval_factory(server, agent, "wipe", {"n": n}, status="denied", decided_by=globex.users["owner"])
    assert queries() == few


def test_the_status_filter_reads_a_request_past_its_expiry_as_expired(
    globex: Any, login: Any, approvals: dict[str, Approval], approval_factory: Any
) -> None:
    late = approval_factory(globex.access.server, globex.access.agent, "wipe", {}, expires_in=-1)
    client = login(globex.users["viewer"])

    def listed(status: str) -> set[int]:
        page = client.get(url("approval", "changelist"), {"status": status})
        assert page.status_code == 200
        return {int(pk) for pk in re.findall(r'href="/admin/mcp_app/approval/(\d+)/change/', page.content.decode())}

    assert listed("pending") == {approvals["globex"].pk, globex["approval"].pk}
    assert listed("expired") == {late.pk}
    assert listed("denied") == set()
