"""Catalog resolution: per-version caching across edits, tenant isolation, binding validation."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import McpServer, ServerTool, Tool


def _server(server):
    return McpServer.objects.get(pk=server.pk)


def test_resolution_is_cached_per_catalog_version(server_factory, tool_factory, django_assert_num_queries):
    server = server_factory()
    tool_factory(server, "echo")
    first = resolve_catalog(_server(server))
    again = _server(server)
    with django_assert_num_queries(0):
        assert resolve_catalog(again) is first


def test_edit_bumps_version_and_changes_the_catalog(server_factory, tool_factory):
    server = server_factory()
    tool = tool_factory(server, "echo")
    before = _server(server)
    catalog = resolve_catalog(before)
    tool.description = "Changed."
    tool.save()
    after = _server(server)
    assert after.catalog_version == before.catalog_version + 1
    new = resolve_catalog(after)
    assert new is not catalog
    assert new.tool("echo").description == "Changed."


def test_stale_server_save_does_not_roll_back_the_catalog_version(server_factory, tool_factory):
    server = server_factory()
    stale = _server(server)
    tool_factory(server, "echo")
    stale.title = "Renamed"
    stale.save()
    assert _server(server).catalog_version > stale.catalog_version


def test_binding_a_tool_of_another_tenant_is_refused(server_factory):
    server = server_factory()
    other = server_factory()
    foreign = Tool.objects.create(tenant=other.tenant, name="foreign", static_result={"content": []})
    with pytest.raises(ValueError, match="belong to different tenants"):
        ServerTool.objects.create(server=server, tool=foreign)
    binding = ServerTool(server=server, tool=foreign)
    with pytest.raises(ValidationError):
        binding.clean()


def test_exposed_names_must_be_unique_per_server(server_factory, tool_factory):
    server = server_factory()
    tool_factory(server, "echo")
    other = Tool.objects.create(tenant=server.tenant, name="other", static_result={"content": []})
    clash = ServerTool(server=server, tool=other, name_override="echo")
    with pytest.raises(ValidationError, match="already exposes"):
        clash.clean()


def test_python_tool_must_be_registered(tenant_factory):
    tool = Tool(tenant=tenant_factory(), name="ghost", kind=Tool.Kind.PYTHON)
    with pytest.raises(ValidationError):
        tool.full_clean()


@pytest.mark.parametrize(
    ("result", "error"),
    [
        (None, None),
        ({"content": []}, {"code": 1, "message": "x"}),
        ({"content": [{"type": "video"}]}, None),
        (None, {"code": "x", "message": "m"}),
        (None, {"code": 1}),
    ],
)
def test_static_tool_configuration_is_validated(tenant_factory, result, error):
    tool = Tool(tenant=tenant_factory(), name="mock", kind=Tool.Kind.STATIC, static_result=result, static_error=error)
    with pytest.raises(ValidationError):
        tool.full_clean()


def test_invalid_input_schema_is_refused(tenant_factory):
    tool = Tool(
        tenant=tenant_factory(),
        name="mock",
        kind=Tool.Kind.STATIC,
        static_result={"content": []},
        input_schema={"type": "object", "properties": {"a": {"type": "nonsense"}}},
    )
    with pytest.raises(ValidationError, match="JSON Schema"):
        tool.full_clean()


def test_each_grant_gets_its_own_view_of_the_same_catalog_version(server_factory, tool_factory):
    """The view's cache key includes the token's grant: one agent's narrowed view is never served to another."""
    from mcp_app.models.agents import CatalogGrant

    server = server_factory()
    echo = tool_factory(server, "echo")
    add = tool_factory(server, "add", position=1)
    row = _server(server)
    narrow = resolve_catalog(row, grant=CatalogGrant(tools=frozenset({echo.pk})))
    full = resolve_catalog(row)
    other = resolve_catalog(row, grant=CatalogGrant(tools=frozenset({add.pk})))
    assert [tool.name for tool in narrow.tools] == ["echo"]
    assert [tool.name for tool in full.tools] == ["echo", "add"]
    assert [tool.name for tool in other.tools] == ["add"]
    assert resolve_catalog(row, grant=CatalogGrant(tools=frozenset({echo.pk})), load=False) is narrow


def test_an_uncached_catalog_is_a_miss_without_a_query_when_loading_is_not_allowed(
    server_factory, django_assert_num_queries
):
    from mcp_app.caching.identity import CacheMiss

    row = _server(server_factory())
    with django_assert_num_queries(0), pytest.raises(CacheMiss):
        resolve_catalog(row, load=False)
