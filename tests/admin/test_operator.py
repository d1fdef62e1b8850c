"""The admin as operators use it: every page renders, tokens are issued through the manager and shown once."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from mcp_app.models import AgentToken, ServerTool, Tool

MODELS = [
    "tenant",
    "tenantmembership",
    "mcpserver",
    "agent",
    "agenttoken",
    "tool",
    "servertool",
    "resource",
    "serverresource",
    "prompt",
    "serverprompt",
]
RECORDS = ["mcpsession", "tooltask"]


@pytest.fixture
def populated(access_factory):
    return access_factory()


@pytest.mark.parametrize("model", MODELS)
def test_changelist_and_add_pages_render(admin_client, populated, model):
    assert admin_client.get(reverse(f"admin:mcp_app_{model}_changelist")).status_code == 200
    assert admin_client.get(reverse(f"admin:mcp_app_{model}_add")).status_code == 200


@pytest.mark.parametrize("model", RECORDS)
def test_sessions_and_tasks_are_listed_but_never_added(admin_client, populated, model):
    assert admin_client.get(reverse(f"admin:mcp_app_{model}_changelist")).status_code == 200
    assert admin_client.get(reverse(f"admin:mcp_app_{model}_add")).status_code == 403


def test_change_pages_render(admin_client, populated):
    for obj in (populated.tenant, populated.server, populated.agent, populated.token):
        url = reverse(f"admin:mcp_app_{obj._meta.model_name}_change", args=[obj.pk])
        assert admin_client.get(url).status_code == 200


def test_adding_a_token_shows_the_raw_value_once_and_stores_only_its_digest(admin_client, populated):
    response = admin_client.post(
        reverse("admin:mcp_app_agenttoken_add"),
        {
            "agent": populated.agent.pk,
            "name": "ci",
            "servers": [populated.server.pk],
            "expires_at_0": "",
            "expires_at_1": "",
        },
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(message) for message in response.context["messages"]]
    raw = re.search(r"mcp_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", " ".join(shown)).group(0)
    token = AgentToken.objects.authenticate(raw)
    assert token is not None and token.name == "ci"
    assert list(token.servers.all()) == [populated.server]
    change_page = admin_client.get(reverse("admin:mcp_app_agenttoken_change", args=[token.pk])).content.decode()
    assert raw not in change_page
    assert token.digest in change_page


def test_revoke_action(admin_client, populated):
    admin_client.post(
        reverse("admin:mcp_app_agenttoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [populated.token.pk]},
    )
    populated.token.refresh_from_db()
    assert populated.token.revoked_at is not None


def test_editing_a_binding_in_the_admin_bumps_the_catalog_version(admin_client, populated):
    binding = ServerTool.objects.filter(server=populated.server).first()
    before = populated.server.catalog_version
    response = admin_client.post(
        reverse("admin:mcp_app_servertool_change", args=[binding.pk]),
        {
            "server": populated.server.pk,
            "tool": binding.tool.pk,
            "enabled": "",
            "position": 0,
            "name_override": "",
            "description_override": "",
        },
    )
    assert response.status_code == 302
    populated.server.refresh_from_db()
    assert populated.server.catalog_version == before + 1


def test_static_tool_form_validates_configuration(admin_client, populated):
    response = admin_client.post(
        reverse("admin:mcp_app_tool_add"),
        {
            "tenant": populated.tenant.pk,
            "name": "mock",
            "kind": "static",
            "input_schema": "{}",
            "output_schema": "null",
            "annotations": "null",
            "static_result": "null",
            "static_error": "null",
        },
    )
    assert response.status_code == 200
    assert "exactly one of" in response.content.decode()
    assert not Tool.objects.filter(name="mock").exists()
