"""The catalog sync's one rule for every kind of entry (``federation.sync.apply``, no upstream process needed).

An entry the upstream lists twice, or whose name (a resource: URI) another entry of the tenant already has, is
imported once or not at all, and reported in ``SyncReport.skipped``, the same way for tools, resources and
prompts; removal and renaming go through the same loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.django_db

#: Per kind: the RemoteCatalog list, one listed item, the model, and how the report names the entry.
KINDS = {
    "tool": ("tools", {"name": "look", "inputSchema": {"type": "object"}}, "Tool", "tool 'up_look'"),
    "resource": ("resources", {"uri": "note://readme", "name": "readme"}, "Resource", "resource 'note://readme'"),
    "prompt": ("prompts", {"name": "greet"}, "Prompt", "prompt 'up_greet'"),
}


def remote_with(**lists: list[dict[str, Any]]) -> Any:
    from mcp_app.federation.sync import RemoteCatalog

    return RemoteCatalog(protocol_version="2026-07-28", server_info=None, capabilities={}, **lists)


@pytest.fixture
def upstream(server_factory: Callable[..., Any]) -> Any:
    from mcp_app.models import Upstream

    server = server_factory()
    return Upstream.objects.create(tenant=server.tenant, name="up", url="https://mcp.example.com/mcp", prefix="up_")


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_listed_twice_is_imported_once_and_reported(upstream: Any, kind: str) -> None:
    from mcp_app import models
    from mcp_app.federation.sync import apply

    listed, item, model, named = KINDS[kind]

    report = apply(upstream, remote_with(**{listed: [item, dict(item)]}))

    assert getattr(models, model).objects.filter(upstream=upstream).count() == 1
    assert report.skipped == [f"{named}: listed twice by the upstream"]
    assert len(report.added) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_the_tenant_already_has_is_reported_and_left_alone(upstream: Any, kind: str) -> None:
    from mcp_app import models
    from mcp_app.federation.sync import apply

    listed, item, model, named = KINDS[kind]
    apply(upstream, remote_with(**{listed: [item]}))
    other = models.Upstream.objects.create(
        tenant=upstream.tenant, name="other", url="https://mcp.example.com/mcp", prefix="up_"
    )

    report = apply(other, remote_with(**{listed: [item]}))

    assert not getattr(models, model).objects.filter(upstream=other).exists()
    assert len(report.skipped) == 1 and report.skipped[0].startswith(f"{named}: the tenant's catalog already has")


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_prefix_renames_in_place_and_a_dropped_entry_is_removed(upstream: Any, kind: str) -> None:
    from mcp_app import models
    from mcp_app.federation.sync import apply

    listed, item, model, _ = KINDS[kind]
    apply(upstream, remote_with(**{listed: [item]}))
    entry = getattr(models, model).objects.get(upstream=upstream)
    upstream.prefix = "gh_"

    renamed = apply(upstream, remote_with(**{listed: [item]}))
    kept = getattr(models, model).objects.get(upstream=upstream)
    dropped = apply(upstream, remote_with())

    assert len(renamed.updated) == 1 and not renamed.added and not renamed.removed
    assert (kept.pk, kept.name) == (entry.pk, entry.name.replace("up_", "gh_", 1))
    assert dropped.removed == renamed.updated
    assert not getattr(models, model).objects.filter(pk=entry.pk).exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_binding_adds_entries_after_those_the_server_lists(upstream: Any, kind: str) -> None:
    from mcp_app import models
    from mcp_app.federation.sync import apply, bind

    listed, item, model, _ = KINDS[kind]
    server = models.McpServer.objects.get(tenant=upstream.tenant)
    own = {
        "tool": {"name": "own", "static_result": {"content": []}},
        "resource": {"uri": "note://own", "name": "own", "text": "own"},
        "prompt": {"name": "own"},
    }[kind]
    hand_made = getattr(models, model).objects.create(tenant=upstream.tenant, **own)
    binding_model = getattr(models, f"Server{model}")
    binding_model.objects.create(server=server, position=5, **{kind: hand_made})
    apply(upstream, remote_with(**{listed: [item]}))

    assert bind(upstream, server) == []

    positions = binding_model.objects.filter(server=server).order_by("position")
    assert [(getattr(b, kind).upstream_id, b.position) for b in positions] == [(None, 5), (upstream.pk, 6)]
