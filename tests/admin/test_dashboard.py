"""The admin index is a dashboard: calls and errors per day (every day of the period), p50/p95 per tool, top agents,
running calls with their progress, open sessions; a tenant's staff see only their tenants, operators every tenant.
The task list shows the running calls with progress, start and elapsed time, from a fragment that refreshes itself."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from mcp_app.models import ToolCall
from mcp_app.permissions import VIEWER
from tests.helpers import running_worker_call


def record(access: Any, tool: str, *, days_ago: int = 0, status: str = "ok", agent_key: str | None = None) -> None:
    ToolCall.objects.create(
        tenant=access.tenant,
        server=access.server,
        agent=access.agent,
        server_key=access.server.server_id,
        agent_key=agent_key or access.agent.agent_id,
        token_prefix="mcp_x",
        tool_name=tool,
        arguments_digest="0" * 64,
        arguments={},
        status=status,
        started_at=timezone.now() - timedelta(days=days_ago),
        finished_at=timezone.now() - timedelta(days=days_ago),
        duration_ms=10.0,
        era="legacy",
        protocol_version="2025-11-25",
    )


@pytest.fixture
def two(db: Any, access_factory: Any, member_factory: Any) -> Any:
    ours = access_factory(tools=())
    theirs = access_factory(tools=())
    record(ours, "our_tool", days_ago=0)
    record(ours, "our_tool", days_ago=3, status="error", agent_key="our-second-agent")
    record(theirs, "their_tool", days_ago=1)
    started_at = timezone.now() - timedelta(seconds=75)
    running_worker_call(
        ours, "our_countdown", started_at=started_at, progress=12, progress_total=30, progress_message="18 to go"
    )
    running_worker_call(
        theirs,
        "their_countdown",
        started_at=started_at,
        progress=1,
        progress_total=2,
        progress_message="their secret step",
    )
    viewer = member_factory((ours.tenant, VIEWER))
    return ours, theirs, viewer


def charts(page: str) -> list[dict[str, Any]]:
    found = re.findall(r'<canvas class="chart"[^>]*data-type="bar" data-value="([^"]+)"', page)
    return [json.loads(html.unescape(value)) for value in found]


def test_a_members_dashboard_draws_every_day_of_their_tenants_only(client: Any, two: Any) -> None:
    ours, theirs, viewer = two
    client.force_login(viewer)
    response = client.get(reverse("admin:index"), {"days": "7"})
    assert response.status_code == 200
    page = response.content.decode()
    per_day, per_tool = charts(page)
    today = timezone.now().date()
    assert per_day["labels"] == [(today - timedelta(days=n)).isoformat() for n in range(6, -1, -1)]
    ok, errors = per_day["datasets"][0]["data"], per_day["datasets"][1]["data"]
    assert ok == [0, 0, 0, 0, 0, 0, 1] and errors == [0, 0, 0, 1, 0, 0, 0]  # zero days drawn as zeros
    assert per_tool["labels"] == ["our_tool"]
    assert [d["label"] for d in per_tool["datasets"]] == ["p50 (ms)", "p95 (ms)"]
    agents = re.findall(r"<tr><td>([^<]+)</td><td>[^<]+</td><td class=\"num\">(\d+)</td>", page)
    assert sorted(agents) == sorted([(ours.agent.agent_id, "1"), ("our-second-agent", "1")])
    assert 'id="mcp-kpi-running">1<' in page
    assert "our_countdown" in page and "40 %" in page and "18 to go" in page
    for foreign in ("their_tool", "their_countdown", "their secret step", theirs.tenant.name, theirs.agent.agent_id):
        assert foreign not in page
    assert 'id="mcp-kpi-streams"' not in page  # the deployment's streams are the operator's


def test_an_operator_sees_every_tenant_and_may_pick_one(admin_client: Any, two: Any) -> None:
    _ours, theirs, _viewer = two
    page = admin_client.get(reverse("admin:index"), {"days": "7"}).content.decode()
    per_day, per_tool = charts(page)
    assert sum(per_day["datasets"][0]["data"]) + sum(per_day["datasets"][1]["data"]) == 3
    assert sorted(per_tool["labels"]) == ["our_tool", "their_tool"]
    assert "our_countdown" in page and "their_countdown" in page
    assert 'id="mcp-kpi-streams"' in page
    page = admin_client.get(reverse("admin:index"), {"days": "7", "tenant": theirs.tenant.pk}).content.decode()
    assert charts(page)[1]["labels"] == ["their_tool"] and "our_countdown" not in page


def test_a_member_cannot_pick_another_tenant(client: Any, two: Any) -> None:
    _ours, theirs, viewer = two
    client.force_login(viewer)
    page = client.get(reverse("admin:index"), {"tenant": theirs.tenant.pk}).content.decode()
    assert charts(page)[1]["labels"] == ["our_tool"]  # ignored: their own tenants, never the other's
    assert "their_tool" not in page


def test_the_task_list_shows_running_calls_with_progress_and_refreshes(client: Any, two: Any) -> None:
    _ours, _theirs, viewer = two
    client.force_login(viewer)
    page = client.get(reverse("admin:mcp_app_tooltask_changelist")).content.decode()
    fragment_url = reverse("admin:mcp_app_tooltask_running")
    assert f'hx-get="{fragment_url}?cards=0"' in page and 'hx-trigger="every 2s"' in page
    assert 'data-percent="40"' in page and "18 to go" in page
    assert re.search(r"1 min 1\d s", page)  # started 75 s ago (elapsed, not a clock: a loaded machine adds a few)
    fragment = client.get(fragment_url).content.decode()
    assert "our_countdown" in fragment and 'data-percent="40"' in fragment
    assert "their_countdown" not in fragment and "their secret step" not in fragment
    assert "their_countdown" not in page


def test_the_dashboards_refresh_carries_its_cards_for_the_chosen_tenant(admin_client: Any, two: Any) -> None:
    """The cards above the running table refresh with it (out-of-band swaps), counting what the table lists."""
    _ours, theirs, _viewer = two
    page = admin_client.get(reverse("admin:index"), {"tenant": theirs.tenant.pk}).content.decode()
    fragment_url = reverse("admin:mcp_app_tooltask_running")
    assert f'hx-get="{fragment_url}?cards=1&amp;tenant={theirs.tenant.pk}"' in page
    assert "Open sessions" in page and "Open streams" not in page
    fragment = admin_client.get(fragment_url, {"cards": "1", "tenant": theirs.tenant.pk}).content.decode()
    assert "their_countdown" in fragment and "our_countdown" not in fragment
    assert '<span id="mcp-kpi-running" hx-swap-oob="true">1</span>' in fragment
    assert re.search(r'<span id="mcp-kpi-sessions" hx-swap-oob="true">\d+</span>', fragment)
    everything = admin_client.get(fragment_url, {"cards": "1"}).content.decode()
    assert '<span id="mcp-kpi-running" hx-swap-oob="true">2</span>' in everything
    assert "hx-swap-oob" not in admin_client.get(fragment_url).content.decode()  # the task list has no cards


def test_the_running_fragment_needs_the_task_view_permission(client: Any, two: Any, django_user_model: Any) -> None:
    outsider = django_user_model.objects.create_user("outsider", password="x", is_staff=True)
    client.force_login(outsider)
    assert client.get(reverse("admin:mcp_app_tooltask_running")).status_code == 403
    assert "mcp-dashboard" not in client.get(reverse("admin:index")).content.decode()


def test_usage_of_several_tenants_and_every_day(two: Any) -> None:
    ours, theirs, _viewer = two
    now = timezone.now()
    since = now - timedelta(days=4)
    both = ToolCall.objects.usage([ours.tenant.pk, theirs.tenant.pk], since, now)
    assert sorted(tool.tool_name for tool in both.tools) == ["our_tool", "their_tool"]
    assert ToolCall.objects.usage([], since, now).tools == ()
    everyone = ToolCall.objects.usage(None, since, now)
    assert sum(day.calls for day in everyone.days) == 3
    days = ToolCall.objects.usage(ours.tenant.pk, since, now).every_day(since, now)
    assert len(days) == 5 and [day.calls for day in days] == [0, 1, 0, 0, 1]
