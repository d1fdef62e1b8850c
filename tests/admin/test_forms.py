"""Usable forms: formatted JSON with validation on save, JSON Schema 2020-12 meta-schema checks, registry-checked
Python tools, help texts that render, a token form limited to the agent's tenant, editable task support."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from mcp_app.models import McpServer, Tool


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mcp_app_{model}_{view}", args=args)


def tool_form(tenant, **overrides):
    data = {
        "tenant": tenant.pk,
        "name": "weather",
        "title": "",
        "description": "",
        "kind": "static",
        "task_support": "forbidden",
        "icons": "null",
        "input_schema": '{"type": "object", "properties": {"city": {"type": "string"}}}',
        "output_schema": "null",
        "annotations": "null",
        "python_name": "",
        "static_result": '{"content": [{"type": "text", "text": "sunny"}]}',
        "static_error": "null",
        "static_cases": "[]",
        "static_delay_ms": 0,
        "static_progress_steps": 0,
    }
    data.update(overrides)
    return data


def errors(response, field=None):
    form = response.context["adminform"].form
    return " ".join(str(e) for e in (form.errors.get(field, []) if field else form.errors.values()))


@pytest.fixture
def editor(globex, login):
    return login(globex.users["admin"])


def test_json_fields_are_shown_indented(globex, editor):
    page = editor.get(url("tool", "change", globex["tool"].pk)).content.decode()
    match = re.search(
        r'<textarea name="static_result"[^>]*class="vLargeTextField mcp-json"[^>]*>\n?(.*?)</textarea>', page, re.S
    )
    shown = html.unescape(match.group(1))
    # Key order is the database's (PostgreSQL's jsonb sorts keys); the layout is two-space indentation.
    assert shown.startswith('{\n  "content": [\n    {\n      "')
    assert json.loads(shown) == {"content": [{"type": "text", "text": "globex says hi"}]}


def test_invalid_json_says_where(globex, editor):
    response = editor.post(url("tool", "add"), tool_form(globex.tenant, static_cases='[{"equals": '))
    assert response.status_code == 200
    assert "Enter valid JSON: Expecting value (line 1)" in errors(response, "static_cases")
    assert not Tool.objects.filter(name="weather").exists()


def test_a_valid_static_tool_is_saved_with_its_task_support(globex, editor):
    response = editor.post(url("tool", "add"), tool_form(globex.tenant, task_support="optional"))
    assert response.status_code == 302
    tool = Tool.objects.get(tenant=globex.tenant, name="weather")
    assert tool.task_support == "optional"
    assert tool.input_schema == {"type": "object", "properties": {"city": {"type": "string"}}}


@pytest.mark.parametrize(
    ("field", "schema"),
    [
        ("input_schema", '{"type": "object", "properties": {"city": {"type": "nonsense"}}}'),
        ("input_schema", '{"type": "object", "required": "city"}'),
        ("output_schema", '{"type": "object", "properties": {"n": {"minimum": "zero"}}}'),
    ],
)
def test_schemas_are_checked_against_the_2020_12_meta_schema(globex, editor, field, schema):
    response = editor.post(url("tool", "add"), tool_form(globex.tenant, **{field: schema}))
    assert response.status_code == 200
    assert "Not a valid JSON Schema (2020-12)" in errors(response, field)
    assert not Tool.objects.filter(name="weather").exists()


def test_static_behaviour_is_validated_on_save(globex, editor):
    response = editor.post(url("tool", "add"), tool_form(globex.tenant, static_cases='[{"bogus": {}}]'))
    assert response.status_code == 200
    assert not Tool.objects.filter(name="weather").exists()


def test_server_versions_and_origins_are_validated(globex, editor):
    server = globex["mcpserver"]
    data = {
        "server_id": server.server_id,
        "name": server.name,
        "title": "",
        "version": "1.0.0",
        "enabled": "on",
        "instructions": "",
        "protocol_versions": '["1999-01-01"]',
        "allowed_origins": '["https://app.example/"]',
        "tool_bindings-TOTAL_FORMS": "0",
        "tool_bindings-INITIAL_FORMS": "0",
        "resource_bindings-TOTAL_FORMS": "0",
        "resource_bindings-INITIAL_FORMS": "0",
        "prompt_bindings-TOTAL_FORMS": "0",
        "prompt_bindings-INITIAL_FORMS": "0",
    }
    response = editor.post(url("mcpserver", "change", server.pk), data)
    assert response.status_code == 200
    assert "Unknown protocol version(s): 1999-01-01" in errors(response, "protocol_versions")
    assert "is not an origin" in errors(response, "allowed_origins")
    fixed = {**data, "protocol_versions": '["2025-11-25"]', "allowed_origins": '["https://app.example"]'}
    assert editor.post(url("mcpserver", "change", server.pk), fixed).status_code == 302
    assert McpServer.objects.get(pk=server.pk).protocol_versions == ["2025-11-25"]


def test_help_texts_render_as_written(globex, editor):
    page = editor.get(url("mcpserver", "add")).content.decode()
    assert "Public identifier in the endpoint URL /mcp/&lt;server id&gt;." in page


def test_a_python_tool_must_name_a_registered_function(globex, editor):
    response = editor.post(url("tool", "add"), tool_form(globex.tenant, kind="python", python_name="no_such_tool"))
    assert response.status_code == 200
    assert "no_such_tool" in errors(response, "python_name")
    response = editor.post(url("tool", "add"), tool_form(globex.tenant, name="echo", kind="python", python_name="echo"))
    assert response.status_code == 302
    assert Tool.objects.get(tenant=globex.tenant, name="echo").python_name == "echo"


def test_a_plain_orm_save_refuses_an_unregistered_python_tool(globex):
    with pytest.raises(ValidationError, match="no_such_tool"):
        Tool.objects.create(tenant=globex.tenant, name="ghost", kind="python", python_name="no_such_tool")
    tool = Tool.objects.create(tenant=globex.tenant, name="echo", kind="python")
    assert tool.python_name == "echo"
    tool.python_name = "vanished"
    with pytest.raises(ValidationError):
        tool.save()


def test_the_token_form_offers_only_the_agents_tenants_servers(acme, globex, admin_client):
    page = admin_client.get(url("agenttoken", "add") + f"?agent={acme['agent'].pk}").content.decode()
    assert f'<option value="{acme["mcpserver"].pk}">' in page
    assert f'<option value="{globex["mcpserver"].pk}">' not in page
    response = admin_client.post(
        url("agenttoken", "add"),
        {
            "agent": acme["agent"].pk,
            "name": "mixed",
            "servers": [acme["mcpserver"].pk, globex["mcpserver"].pk],
            "expires_at_0": "",
            "expires_at_1": "",
        },
    )
    assert response.status_code == 200
    assert "mcp-new-token" not in response.content.decode()
    assert not acme["agent"].tokens.filter(name="mixed").exists()


def test_the_agent_page_links_to_issuing_a_token_for_it(globex, editor, login):
    agent = globex["agent"]
    link = url("agenttoken", "add") + f"?agent={agent.pk}"
    assert link in editor.get(url("agent", "change", agent.pk)).content.decode()
    assert link not in login(globex.users["viewer"]).get(url("agent", "change", agent.pk)).content.decode()


def test_the_raw_token_is_shown_once(globex, editor):
    data = {
        "agent": globex["agent"].pk,
        "name": "ci",
        "servers": [globex["mcpserver"].pk],
        "expires_at_0": "",
        "expires_at_1": "",
    }
    response = editor.post(url("agenttoken", "add"), data, follow=True)
    page = response.content.decode()
    start = page.index('<code id="mcp-new-token">') + len('<code id="mcp-new-token">')
    raw = page[start : page.index("</code>", start)]
    token = globex["agent"].tokens.get(name="ci")
    assert token.digest != raw and raw.startswith(f"mcp_{token.prefix}_")
    again = editor.get(url("agenttoken", "change", token.pk)).content.decode()
    assert raw not in again and raw not in editor.get(url("agenttoken", "changelist")).content.decode()
