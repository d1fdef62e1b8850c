""" "Try it": a member runs a tool, resource or prompt from the admin as an agent token of the same tenant, through
the protocol dispatcher like a request on the wire, and sees the result, progress and errors."""

from __future__ import annotations

import html
import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from mcp_app.models import AgentToken, ServerTool, Tool
from mcp_app.protocol.errors import INVALID_PARAMS
from tests.transport.helpers import call, rpc


def try_url(obj) -> str:
    return reverse(f"admin:mcp_app_{obj._meta.model_name}_try_it", args=[obj.pk])


def run(client, obj, world, *, token=None, **fields):
    data = {"server": world["mcpserver"].pk, "token": (token or world["agenttoken"]).pk, **fields}
    if "arguments" in data and not isinstance(data["arguments"], str):
        data["arguments"] = json.dumps(data["arguments"])
    return client.post(try_url(obj), data)


def block(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}">(.*?)</(pre|ol|p)>', page, re.S)
    assert match, f"no #{element_id} in the page"
    return html.unescape(match.group(1))


@pytest.fixture
def editor(globex, login):
    return login(globex.users["admin"])


def test_a_static_tool_runs_with_its_progress(globex, editor):
    tool = globex["tool"]
    tool.static_delay_ms = 30
    tool.static_progress_steps = 3
    tool.save()
    response = run(editor, tool, globex, arguments={})
    assert response.status_code == 200
    page = response.content.decode()
    assert json.loads(block(page, "mcp-try-it-result")) == {"content": [{"type": "text", "text": "globex says hi"}]}
    assert block(page, "mcp-try-it-progress").count("<li>") == 3
    sent = json.loads(block(page, "mcp-try-it-request"))
    assert sent["method"] == "tools/call" and sent["params"]["name"] == tool.name


def test_the_result_is_what_the_wire_answers(transactional_db, globex, editor):
    # transactional: the wire's consumer recycles database connections around its queries
    tool = Tool.objects.create(tenant=globex.tenant, name="add", kind="python")
    ServerTool.objects.create(server=globex["mcpserver"], tool=tool, position=1, name_override="plus")
    page = run(editor, tool, globex, arguments={"a": 2, "b": 3}).content.decode()
    shown = json.loads(block(page, "mcp-try-it-result"))
    wire = async_to_sync(call)(globex.access, rpc("tools/call", {"name": "plus", "arguments": {"a": 2, "b": 3}}))
    assert shown == wire.json()["result"]
    assert shown["structuredContent"] == {"result": 5.0}


def test_invalid_arguments_show_the_error_as_the_revision_has_it(globex, editor):
    tool = Tool.objects.create(tenant=globex.tenant, name="echo", kind="python")
    ServerTool.objects.create(server=globex["mcpserver"], tool=tool, position=1)
    page = run(editor, tool, globex, arguments={"wrong": 1}).content.decode()
    # 2025-11-25 (the console's revision): invalid arguments are a tool error the model can read.
    assert "The tool reported an error (isError)." in page
    assert json.loads(block(page, "mcp-try-it-result"))["isError"] is True


def test_an_unknown_tool_shows_the_protocol_error(globex, editor):
    binding = globex["servertool"]
    binding.enabled = False
    binding.save()
    page = run(editor, globex["tool"], globex, arguments={}).content.decode()
    assert block(page, "mcp-try-it-error").startswith(f"Error {INVALID_PARAMS}: Unknown tool")


def test_a_static_error_is_shown(globex, editor):
    tool = globex["tool"]
    tool.static_result = None
    tool.static_error = {"code": -32001, "message": "Quota exceeded"}
    tool.save()
    page = run(editor, tool, globex, arguments={}).content.decode()
    assert block(page, "mcp-try-it-error").strip() == "Error -32001: Quota exceeded"


def test_arguments_must_be_a_json_object(globex, editor):
    response = run(editor, globex["tool"], globex, arguments="[1, 2]")
    assert "Arguments are a JSON object." in response.content.decode()
    assert response.context["run"] is None


def test_a_token_without_the_server_in_scope_is_refused_like_on_the_wire(globex, editor):
    token, _raw = AgentToken.objects.issue_token(globex["agent"], servers=[])
    page = run(editor, globex["tool"], globex, token=token, arguments={}).content.decode()
    assert block(page, "mcp-try-it-refused").strip() == "Refused: The token is not allowed to use this server."


def test_resource_and_prompt(globex, editor):
    page = run(editor, globex["resource"], globex, uri=globex["resource"].uri).content.decode()
    assert json.loads(block(page, "mcp-try-it-result"))["contents"][0]["text"] == "hi"
    page = run(editor, globex["prompt"], globex, arguments={}).content.decode()
    messages = json.loads(block(page, "mcp-try-it-result"))["messages"]
    assert messages == [{"role": "user", "content": {"type": "text", "text": "Hello"}}]


def test_only_the_own_tenants_usable_tokens_and_servers_are_offered(acme, globex, editor):
    revoked, _ = AgentToken.objects.issue_token(globex["agent"], servers=[globex["mcpserver"]])
    revoked.revoke()
    for token, server in ((acme["agenttoken"], globex["mcpserver"]), (revoked, globex["mcpserver"])):
        response = editor.post(try_url(globex["tool"]), {"server": server.pk, "token": token.pk, "arguments": "{}"})
        assert "Select a valid choice" in response.content.decode()
        assert response.context["run"] is None
    response = editor.post(
        try_url(globex["tool"]), {"server": acme["mcpserver"].pk, "token": globex["agenttoken"].pk, "arguments": "{}"}
    )
    assert response.context["run"] is None


@pytest.mark.parametrize("model", ["tool", "resource", "prompt"])
def test_across_tenants_404_and_viewers_403(acme, globex, login, model):
    assert login(globex.users["admin"]).get(try_url(acme[model])).status_code == 404
    assert login(globex.users["owner"]).post(try_url(acme[model]), {}).status_code == 404
    viewer = login(globex.users["viewer"])
    assert viewer.get(try_url(globex[model])).status_code == 403
    assert viewer.post(try_url(globex[model]), {}).status_code == 403
    assert login(globex.users["admin"]).get(try_url(globex[model])).status_code == 200
    change = (
        login(globex.users["admin"])
        .get(reverse(f"admin:mcp_app_{model}_change", args=[globex[model].pk]))
        .content.decode()
    )
    assert try_url(globex[model]) in change
