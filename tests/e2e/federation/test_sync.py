"""Catalog sync on a schedule: Celery beat's ``mcp_app.sync_upstreams`` re-reads the upstreams that are due.

An upstream is due when its interval (its own, else ``UPSTREAM_SYNC_INTERVAL_SECONDS``) has passed since its last
sync; the others are left alone, and a disabled upstream is never read.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from tests.conftest import Access
from tests.federation.upstream_server import UpstreamProcess

pytestmark = pytest.mark.django_db(transaction=True)


def imported(upstream: Any) -> set[str]:
    from mcp_app.models import Tool

    return set(Tool.objects.filter(upstream=upstream).values_list("name", flat=True))


def test_beat_schedules_the_sync_task() -> None:
    from mcp_host.celery import app

    schedule = {entry["task"]: entry["schedule"] for entry in app.conf.beat_schedule.values()}

    assert schedule["mcp_app.sync_upstreams"] == 60.0
    assert "mcp_app.sync_upstreams" in app.tasks


def test_the_scheduled_sync_reads_the_upstreams_that_are_due(
    upstream_server: Callable[[str], UpstreamProcess],
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],
    unique_tag: str,
) -> None:
    from mcp_app.tasks import sync_upstreams

    private = upstream_server("stateless")
    access = access_factory(tools=())
    due = federate(access, private.url, name="due", prefix="due_", sync_interval_seconds=60)
    recent = federate(access, private.url, name="recent", prefix="recent_", sync_interval_seconds=3600)
    disabled = federate(access, private.url, name="off", prefix="off_", sync_interval_seconds=60)
    type(disabled).objects.filter(pk=disabled.pk).update(enabled=False)
    two_minutes_ago = timezone.now() - datetime.timedelta(minutes=2)
    type(due).objects.filter(pk__in=[due.pk, disabled.pk]).update(last_synced_at=two_minutes_ago)
    private.add_tool(f"new_{unique_tag}")

    sync_upstreams()

    assert f"due_new_{unique_tag}" in imported(due)
    assert f"recent_new_{unique_tag}" not in imported(recent)
    assert f"off_new_{unique_tag}" not in imported(disabled)


def test_a_template_whose_variables_sit_side_by_side_is_skipped_as_at_save(
    allow_loopback: None, access_factory: Callable[..., Access]
) -> None:
    """Issue 25 #12: where ``{a}{b}`` splits is arbitrary, and such a template is refused in the admin and the
    API; one synced from an upstream is skipped alike, and reported (matching is linear-time either way)."""
    from mcp_app.federation.sync import RemoteCatalog, apply
    from mcp_app.models import Resource, Upstream

    access = access_factory(tools=())
    upstream = Upstream.objects.create(tenant=access.tenant, name="tpl", url="http://127.0.0.1:9/mcp", prefix="tpl_")
    remote = RemoteCatalog(
        protocol_version="2026-07-28",
        server_info=None,
        capabilities={"resources": {}},
        templates=[
            {"uriTemplate": "probe://{a}{b}/end", "name": "adjacent"},
            {"uriTemplate": "probe://{a}-{b}/end", "name": "separated"},
        ],
    )

    report = apply(upstream, remote)

    assert list(Resource.objects.filter(upstream=upstream).values_list("uri", flat=True)) == ["probe://{a}-{b}/end"]
    assert [line for line in report.skipped if "probe://{a}{b}/end" in line and "side by side" in line], report
