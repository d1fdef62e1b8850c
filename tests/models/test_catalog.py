"""Catalog entries and bindings: one same-tenant rule (``TenantScoped``) for every binding and for an entry's
upstream, in ``clean()`` (keyed on the foreign row's field) and on ``save()``; and the migration to the shared
entry base, which keeps every row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from mcp_app.models import (
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tool,
    Upstream,
    UpstreamBinding,
)

URL = "https://mcp.example.com/mcp"


def entries(tenant: Any) -> dict[str, Any]:
    """One entry of each kind, and an upstream, of ``tenant``."""
    return {
        "tool": Tool.objects.create(tenant=tenant, name="t", static_result={"content": []}),
        "resource": Resource.objects.create(tenant=tenant, uri="note://a", name="a", text="a"),
        "prompt": Prompt.objects.create(tenant=tenant, name="p"),
        "upstream": Upstream.objects.create(tenant=tenant, name="up", url=URL),
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("model", "field"),
    [(ServerTool, "tool"), (ServerResource, "resource"), (ServerPrompt, "prompt"), (UpstreamBinding, "upstream")],
)
def test_a_server_only_exposes_rows_of_its_own_tenant(server_factory: Callable[..., Any], model: Any, field: str):
    server = server_factory()
    foreign = entries(server_factory().tenant)[field]
    binding = model(server=server, **{field: foreign})

    with pytest.raises(ValidationError) as refused:
        binding.full_clean()
    with pytest.raises(ValueError, match="belong to different tenants"):
        binding.save()

    wrong = "server" if model is UpstreamBinding else field  # the upstream is the anchor of its binding
    assert list(refused.value.message_dict) == [wrong]
    assert not model.objects.exists()
    model(server=server, **{field: entries(server.tenant)[field]}).full_clean()  # the control: same tenant


@pytest.mark.django_db
@pytest.mark.parametrize("model", [Tool, Resource, Prompt])
def test_an_entry_names_an_upstream_of_its_own_tenant(server_factory: Callable[..., Any], model: Any):
    ours, theirs = server_factory().tenant, server_factory().tenant
    entry = entries(ours)[model._meta.model_name]
    entry.kind = "upstream"
    entry.remote_name = "x"

    entry.upstream = Upstream.objects.create(tenant=theirs, name="theirs", url=URL)
    with pytest.raises(ValidationError) as refused:
        entry.clean()
    with pytest.raises(ValueError, match="belong to different tenants"):
        entry.save()
    assert list(refused.value.message_dict) == ["upstream"]

    entry.upstream = None
    with pytest.raises(ValidationError, match="imported by an upstream's sync"):
        entry.clean()

    entry.upstream = Upstream.objects.get(tenant=ours)
    entry.clean()
    entry.save()


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_the_entry_base_keeps_every_row() -> None:
    before, after = [("mcp_app", "0018_roles_admin")], [("mcp_app", "0019_catalog_entry_base")]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        tenant = old.get_model("mcp_app", "Tenant").objects.create(slug="kept", name="Kept")
        upstream = old.get_model("mcp_app", "Upstream").objects.create(tenant=tenant, name="up", url=URL)
        server = old.get_model("mcp_app", "McpServer").objects.create(tenant=tenant, server_id="kept", name="k")
        common = {"tenant": tenant, "kind": "upstream", "upstream": upstream, "remote_name": "r" * 128}
        tool = old.get_model("mcp_app", "Tool").objects.create(name="up_t", description="d", **common)
        old.get_model("mcp_app", "Resource").objects.create(uri="note://r", name="up_r", **common)
        old.get_model("mcp_app", "Prompt").objects.create(name="up_p", title="P", **common)
        old.get_model("mcp_app", "ServerTool").objects.create(server=server, tool=tool, position=3)

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps

        for name, key in (("Tool", "up_t"), ("Resource", "up_r"), ("Prompt", "up_p")):
            row = new.get_model("mcp_app", name).objects.get(name=key)
            assert (row.tenant_id, row.upstream_id, row.remote_name) == (tenant.pk, upstream.pk, "r" * 128)
        binding = new.get_model("mcp_app", "ServerTool").objects.get()
        assert (binding.server_id, binding.tool_id, binding.position) == (server.pk, tool.pk, 3)
        assert new.get_model("mcp_app", "Tool").objects.get().description == "d"
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
