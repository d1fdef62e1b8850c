"""The operator's allow-list of code-registered tools per tenant: a tenant binds only what it is allowed, and the
catalog never exposes anything else, even when a row says otherwise (bound before the operator withdrew it)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import McpServer, ServerTool, Tenant, Tool


@pytest.fixture
def tenant(tenant_factory):
    return tenant_factory("initech", allowed_python_tools=["add"])


def names(server) -> list[str]:
    return [tool.name for tool in resolve_catalog(McpServer.objects.get(pk=server.pk)).tools]


def test_a_new_tenant_may_use_no_python_tool(db):
    tenant = Tenant.objects.create(slug="fresh", name="Fresh")
    assert tenant.allowed_python_tools == []
    with pytest.raises(ValidationError, match="not allowed"):
        Tool(tenant=tenant, name="echo", kind="python").full_clean()


def test_only_allowed_tools_validate(tenant):
    Tool(tenant=tenant, name="add", kind="python").full_clean()
    with pytest.raises(ValidationError, match="has not allowed 'echo'"):
        Tool(tenant=tenant, name="echo", kind="python").full_clean()
    tenant.allowed_python_tools = ["*"]
    Tool(tenant=tenant, name="echo", kind="python").full_clean()


def test_binding_a_withdrawn_tool_is_refused(tenant, server_factory):
    server = server_factory(tenant=tenant)
    echo = Tool.objects.create(tenant=tenant, name="echo", kind="python")  # a row from before the allow-list
    with pytest.raises(ValidationError, match="not allowed"):
        ServerTool(server=server, tool=echo).full_clean()


def test_the_catalog_leaves_out_disallowed_rows_and_follows_the_allow_list(tenant, server_factory):
    server = server_factory(tenant=tenant)
    for position, name in enumerate(("add", "echo")):
        tool = Tool.objects.create(tenant=tenant, name=name, kind="python")
        ServerTool.objects.create(server=server, tool=tool, position=position)
    assert names(server) == ["add"]
    tenant.allow_python_tools(["echo"])  # an allow-list change reaches the cached catalog at once
    assert names(server) == ["add", "echo"]
    tenant.allowed_python_tools = []
    tenant.save()
    assert names(server) == []


def test_the_allow_list_names_registered_tools_only(tenant):
    tenant.allowed_python_tools = ["add", "no_such_tool"]
    with pytest.raises(ValidationError, match="no_such_tool"):
        tenant.full_clean()
    tenant.allowed_python_tools = "add"
    with pytest.raises(ValidationError):
        tenant.full_clean()


def test_only_superusers_edit_it_and_members_pick_only_allowed_tools(tenant, member_factory, admin_client, client):
    owner = member_factory((tenant, "owner"))
    client.force_login(owner)
    page = client.get(reverse("admin:mcp_app_tool_add")).content.decode()
    assert '<option value="add">' in page and '<option value="echo">' not in page
    change = client.get(reverse("admin:mcp_app_tenant_change", args=[tenant.pk])).content.decode()
    assert 'name="allowed_python_tools"' not in change
    operator = admin_client.get(reverse("admin:mcp_app_tenant_change", args=[tenant.pk])).content.decode()
    assert 'name="allowed_python_tools"' in operator
    response = admin_client.post(
        reverse("admin:mcp_app_tenant_change", args=[tenant.pk]),
        {
            "slug": tenant.slug,
            "name": tenant.name,
            "is_active": "on",
            "allowed_python_tools": '["add", "echo"]',
            "time_zone": "UTC",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    assert Tenant.objects.get(pk=tenant.pk).allowed_python_tools == ["add", "echo"]
