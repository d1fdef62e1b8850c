"""The audit admin: a member sees only their tenants' calls, in the list, the filters, the change page and the
usage page; nothing can be added, edited or deleted; arguments show redacted; the usage charts are inline SVG
(no script, no external asset). Also the grant fields of the token form."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from mcp_app.models import AgentToken, Tool, ToolCall
from mcp_app.permissions import VIEWER

CHANGELIST = "admin:mcp_app_toolcall_changelist"
USAGE = "admin:mcp_app_toolcall_usage"


def record(access: Any, tool: str, status: str = "ok", **fields: Any) -> ToolCall:
    now = timezone.now()
    return ToolCall.objects.create(
        tenant=access.tenant,
        server=access.server,
        agent=access.agent,
        server_key=access.server.server_id,
        agent_key=access.agent.agent_id,
        token_prefix=access.token.prefix,
        tool_name=tool,
        arguments_digest="d" * 64,
        arguments=fields.pop("arguments", {"q": "x", "api_key": "[redacted]"}),
        status=status,
        started_at=now - timedelta(minutes=5),
        finished_at=now - timedelta(minutes=5) + timedelta(milliseconds=12),
        duration_ms=12.0,
        era="legacy",
        protocol_version="2025-11-25",
        **fields,
    )


@pytest.fixture
def two(db: Any, access_factory: Any, server_factory: Any, member_factory: Any) -> Any:
    ours = access_factory(tools=())
    theirs = access_factory(tools=())
    Tool.objects.create(tenant=ours.tenant, name="our_catalog_tool")
    Tool.objects.create(tenant=theirs.tenant, name="their_catalog_tool")
    record(ours, "our_tool")
    record(ours, "our_tool", status="tool_error")
    their_call = record(theirs, "their_tool")
    viewer = member_factory((ours.tenant, VIEWER))
    return ours, theirs, their_call, viewer


def test_a_member_sees_only_their_tenants_calls_and_choices(client: Any, two: Any) -> None:
    _ours, theirs, _their_call, viewer = two
    client.force_login(viewer)
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count("our_tool") >= 2
    for foreign in (
        "their_tool",
        theirs.server.server_id,
        theirs.agent.agent_id,
        theirs.tenant.name,
        "their_catalog_tool",
    ):
        assert foreign not in page, foreign
    assert "our_catalog_tool" in page  # the tool filter offers the tenant's catalog names
    # Filtering on their tenant, server or agent by id finds nothing rather than their rows.
    for parameter, value in (("tenant", theirs.tenant.pk), ("server", theirs.server.pk), ("agent", theirs.agent.pk)):
        filtered = client.get(reverse(CHANGELIST), {parameter: value}).content.decode()
        assert "their_tool" not in filtered


def test_filters_narrow_the_list(client: Any, two: Any) -> None:
    ours, _theirs, _their_call, viewer = two
    client.force_login(viewer)
    errors = client.get(reverse(CHANGELIST), {"status__exact": "tool_error"})
    assert errors.context["cl"].result_count == 1
    by_tool = client.get(reverse(CHANGELIST), {"tool": "our_tool", "server": ours.server.pk, "agent": ours.agent.pk})
    assert by_tool.context["cl"].result_count == 2
    none = client.get(reverse(CHANGELIST), {"tool": "another"})
    assert none.context["cl"].result_count == 0


def test_the_audit_is_read_only_and_another_tenants_call_is_not_found(client: Any, two: Any, admin_client: Any) -> None:
    ours, _theirs, their_call, viewer = two
    client.force_login(viewer)
    own = ToolCall.objects.filter(tenant=ours.tenant).first()
    page = client.get(reverse("admin:mcp_app_toolcall_change", args=[own.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "[redacted]" in text and 'name="_save"' not in text
    foreign = client.get(reverse("admin:mcp_app_toolcall_change", args=[their_call.pk]))
    assert foreign.status_code in (302, 404)  # the admin's "does not exist", exactly as for a missing id
    assert (
        "their_tool"
        not in client.get(foreign.url if foreign.status_code == 302 else reverse(CHANGELIST)).content.decode()
    )
    # Even a superuser cannot add, change or delete audit rows.
    assert admin_client.get(reverse("admin:mcp_app_toolcall_add")).status_code == 403
    assert (
        admin_client.post(reverse("admin:mcp_app_toolcall_delete", args=[own.pk]), {"post": "yes"}).status_code == 403
    )
    assert (
        admin_client.post(reverse("admin:mcp_app_toolcall_change", args=[own.pk]), {"tool_name": "x"}).status_code
        == 403
    )
    assert ToolCall.objects.filter(pk=own.pk, tool_name="our_tool").exists()


def test_the_usage_page_draws_the_members_tenant_offline(client: Any, two: Any) -> None:
    _ours, theirs, _their_call, viewer = two
    client.force_login(viewer)
    response = client.get(reverse(USAGE), {"days": "7"})  # one tenant: chosen without asking
    assert response.status_code == 200
    page = response.content.decode()
    # Two Chart.js charts (unfold's chart component), their data in the page; every day of the period drawn.
    charts = re.findall(r'<canvas class="chart"[^>]*data-type="bar" data-value="([^"]+)"', page)
    assert len(charts) == 2
    per_day = json.loads(html.unescape(charts[0]))
    assert len(per_day["labels"]) == 7 and per_day["labels"][-1] == timezone.now().date().isoformat()
    assert sum(per_day["datasets"][0]["data"]) + sum(per_day["datasets"][1]["data"]) == 2
    assert json.loads(html.unescape(charts[1]))["labels"] == ["our_tool"]
    assert not re.search(r'(src|href)="https?://', page)  # nothing from a CDN: Chart.js comes with the admin
    rows = re.findall(
        r'<tr>\s*<td><a [^>]*>([^<]+)</a></td>\s*<td class="num">(\d+)</td><td class="num">(\d+)</td>', page
    )
    assert rows == [("our_tool", "2", "1")]
    assert "their_tool" not in page and theirs.tenant.name not in page
    assert client.get(reverse(USAGE), {"tenant": theirs.tenant.pk}).status_code == 404


def test_the_token_form_grants_entries_of_the_agents_tenant_only(admin_client: Any, two: Any) -> None:
    ours, _theirs, _their_call, _viewer = two
    own_tool = Tool.objects.get(name="our_catalog_tool")
    foreign_tool = Tool.objects.get(name="their_catalog_tool")
    response = admin_client.post(
        reverse("admin:mcp_app_agenttoken_add"),
        {
            "agent": ours.agent.pk,
            "name": "one tool",
            "servers": [ours.server.pk],
            "limit_to_grant": "on",
            "granted_tools": [own_tool.pk, foreign_tool.pk],
            "expires_at_0": "",
            "expires_at_1": "",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert not AgentToken.objects.filter(name="one tool").exists()  # another tenant's tool is not a choice
    assert "granted_tools" in response.context["adminform"].form.errors
    response = admin_client.post(
        reverse("admin:mcp_app_agenttoken_add"),
        {
            "agent": ours.agent.pk,
            "name": "one tool",
            "servers": [ours.server.pk],
            "limit_to_grant": "on",
            "granted_tools": [own_tool.pk],
            "expires_at_0": "",
            "expires_at_1": "",
        },
        follow=True,
    )
    token = AgentToken.objects.get(name="one tool")
    assert token.limit_to_grant and not token.read_only
    assert list(token.granted_tools.all()) == [own_tool]
    assert re.search(r"mcp_[0-9a-f]{8}_", " ".join(str(m) for m in response.context["messages"]))
    grant = AgentToken.objects.catalog_grant(token)
    assert grant.tools == frozenset({own_tool.pk}) and grant.resources == frozenset() and grant.prompts == frozenset()
