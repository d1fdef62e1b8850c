""" "Try it": a member runs a tool, resource or prompt from the admin as an agent token of the same tenant, through
the protocol dispatcher like a request on the wire, and sees the result, progress and errors."""

from __future__ import annotations

import html
import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import reverse

from mcp_app.models import AgentToken, McpServer, ServerTool, Tool
from mcp_app.protocol.errors import INVALID_PARAMS
from tests.helpers import call, rpc


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


# -- the form built from the input schema, the preselected server, live progress ------------------------------------


def test_a_python_tools_form_is_built_from_its_derived_schema(transactional_db, globex, editor):
    tool = Tool.objects.create(tenant=globex.tenant, name="add", kind="python")
    ServerTool.objects.create(server=globex["mcpserver"], tool=tool, position=1)
    page = editor.get(try_url(tool)).content.decode()
    for name in ("arg__a", "arg__b"):
        assert re.search(rf'<input type="number" name="{name}"[^>]*required|<input type="number" name="{name}"', page)
    assert 'name="input_mode" value="form"' in page and "checked" in page
    data = {"server": globex["mcpserver"].pk, "token": globex["agenttoken"].pk, "input_mode": "form"}
    page = editor.post(try_url(tool), {**data, "arg__a": "2", "arg__b": "3"}).content.decode()
    assert json.loads(block(page, "mcp-try-it-result"))["structuredContent"] == {"result": 5.0}
    sent = json.loads(block(page, "mcp-try-it-request"))
    assert sent["params"]["arguments"] == {"a": 2, "b": 3}
    # A required argument left empty is the form's error; nothing runs.
    response = editor.post(try_url(tool), {**data, "arg__a": "2", "arg__b": ""})
    assert response.context["run"] is None
    assert "This argument is required." in str(response.context["form"].errors["arg__b"])
    # Raw JSON is still possible on the same page.
    page = editor.post(try_url(tool), {**data, "input_mode": "json", "arguments": '{"a": 1, "b": 1}'}).content.decode()
    assert json.loads(block(page, "mcp-try-it-result"))["structuredContent"] == {"result": 2.0}


def test_the_server_is_preselected(globex, editor):
    other = McpServer.objects.create(tenant=globex.tenant, server_id="globex-second", name="second")
    ServerTool.objects.create(server=other, tool=globex["tool"], position=0)
    form = editor.get(try_url(globex["tool"])).context["form"]
    assert form["server"].value() is not None  # the first, without asking
    form = editor.get(try_url(globex["tool"]), {"server": other.pk}).context["form"]
    assert form["server"].value() == other.pk
    assert form["token"].value() == globex["agenttoken"].pk


STREAMED = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")


@STREAMED
def test_progress_is_streamed_while_the_call_runs(globex, editor):
    tool = globex["tool"]
    tool.static_delay_ms = 30
    tool.static_progress_steps = 3
    tool.save()
    data = {"server": globex["mcpserver"].pk, "token": globex["agenttoken"].pk, "arguments": "{}", "_stream": "1"}
    response = editor.post(try_url(tool), data)
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    events = [json.loads(line) for line in b"".join(response).splitlines()]  # the async stream, consumed
    assert [event["type"] for event in events] == ["started", "notification", "notification", "notification", "outcome"]
    progress = [event["message"]["params"]["progress"] for event in events if event["type"] == "notification"]
    assert progress == sorted(progress) and len(progress) == 3
    outcome = events[-1]["html"]
    assert json.loads(block(outcome, "mcp-try-it-result")) == {"content": [{"type": "text", "text": "globex says hi"}]}


@STREAMED
def test_the_stream_keeps_the_pages_checks(acme, globex, login, editor):
    data = {"server": globex["mcpserver"].pk, "token": globex["agenttoken"].pk, "arguments": "{}", "_stream": "1"}
    # CSRF: the stream is the same POST, refused without the token.
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(globex.users["admin"])
    assert strict.post(try_url(globex["tool"]), data).status_code == 403
    # Another tenant's entry, a viewer, another tenant's token: as for the page.
    assert editor.post(try_url(acme["tool"]), data).status_code == 404
    assert login(globex.users["viewer"]).post(try_url(globex["tool"]), data).status_code == 403
    response = editor.post(try_url(globex["tool"]), {**data, "token": acme["agenttoken"].pk})
    assert response["Content-Type"].startswith("text/html") and response.context["run"] is None
