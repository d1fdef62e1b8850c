"""``manage.py mcp_demo``: one JSON object, idempotent set-up, one live demo token (reused or replaced)."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from mcp_app.contrib.conformance.setup import LEGACY_TOOLS, PROMPTS, PYTHON_TOOLS, RESOURCES, STATIC_TOOLS, TASK_TOOLS
from mcp_app.models import Agent, AgentToken, McpServer, ServerPrompt, ServerResource, ServerTool, Tenant
from mcp_app.protocol.versions import ALL_VERSIONS


def run_demo(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp_demo", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_json_output_is_exactly_one_object():
    output = run_demo("--json", "--base-url", "http://example.test:9000/")
    access = json.loads(output)
    assert set(access) == {"url", "server_id", "agent_id", "token", "oauth"}
    assert access["oauth"]["url"] == "http://example.test:9000/mcp/demo"
    assert access["oauth"]["username"] == "demo"
    assert access["url"] == "http://example.test:9000/mcp/demo?agentId=demo-agent"
    assert access["server_id"] == "demo" and access["agent_id"] == "demo-agent"
    assert output.strip().count("\n") == 0


@pytest.mark.django_db
def test_idempotent_and_a_rerun_revokes_the_previous_token():
    first = json.loads(run_demo("--json"))
    second = json.loads(run_demo("--json"))
    assert first["token"] != second["token"]
    assert AgentToken.objects.authenticate(first["token"]) is None
    assert AgentToken.objects.filter(agent__agent_id="demo-agent", revoked_at__isnull=True).count() == 1
    assert Tenant.objects.filter(slug="demo").count() == 1
    assert McpServer.objects.filter(server_id="demo").count() == 1
    assert McpServer.objects.get(server_id="demo-modern").protocol_versions == ["2026-07-28"]
    assert Agent.objects.filter(agent_id="demo-agent").count() == 1
    assert list(
        ServerTool.objects.filter(server__server_id="demo").order_by("position").values_list("tool__name", flat=True)
    ) == ["echo", "add", "get_time", "progress_demo", "countdown"]
    token = AgentToken.objects.authenticate(second["token"])
    assert token is not None
    assert sorted(token.servers.values_list("server_id", flat=True)) == ["conformance", "demo", "demo-modern"]


@pytest.mark.django_db
def test_token_file_is_reused_while_the_token_works(tmp_path):
    token_file = tmp_path / "demo-token"
    first = json.loads(run_demo("--json", "--token-file", str(token_file)))
    assert token_file.read_text().strip() == first["token"]
    assert token_file.stat().st_mode & 0o777 == 0o600
    second = json.loads(run_demo("--json", "--token-file", str(token_file)))
    assert second["token"] == first["token"]
    assert AgentToken.objects.filter(agent__agent_id="demo-agent", revoked_at__isnull=True).count() == 1
    AgentToken.objects.authenticate(first["token"]).revoke()
    third = json.loads(run_demo("--json", "--token-file", str(token_file)))
    assert third["token"] != first["token"]
    assert token_file.read_text().strip() == third["token"]
    assert AgentToken.objects.authenticate(third["token"]) is not None


@pytest.mark.django_db
def test_a_token_file_holding_someone_elses_token_is_not_adopted(tmp_path, token_factory):
    _other, raw = token_factory(name="mcp_demo")
    token_file = tmp_path / "demo-token"
    token_file.write_text(raw)
    access = json.loads(run_demo("--json", "--token-file", str(token_file)))
    assert access["token"] != raw
    assert AgentToken.objects.authenticate(raw) is not None  # not the demo agent's: left alone


@pytest.mark.django_db
def test_conformance_server_is_ensured_with_stable_bindings():
    run_demo("--json", "--base-url", "http://example.test:9000/")
    run_demo("--json")
    server = McpServer.objects.get(server_id="conformance")
    assert server.tenant.slug == "demo"
    assert server.protocol_versions == list(ALL_VERSIONS)
    assert server.allowed_origins == ["http://127.0.0.1:8000", "http://localhost:8000", "http://example.test:9000"]
    tools = list(ServerTool.objects.filter(server=server).order_by("position").values_list("tool__name", flat=True))
    assert tools[0] == "test_simple_text"
    assert len(tools) == len(set(tools)) == len(PYTHON_TOOLS) + len(STATIC_TOOLS) + len(LEGACY_TOOLS) + len(TASK_TOOLS)
    uris = list(
        ServerResource.objects.filter(server=server).order_by("position").values_list("resource__uri", flat=True)
    )
    assert uris == [resource["uri"] for resource in RESOURCES]
    assert ServerPrompt.objects.filter(server=server).count() == len(PROMPTS)


@pytest.mark.django_db
def test_human_output_names_url_agent_and_token():
    output = run_demo()
    assert "http://127.0.0.1:8000/mcp/demo?agentId=demo-agent" in output
    assert "demo-agent" in output
    assert "mcp_" in output
    token = json.loads(run_demo("--json"))["token"]
    last = run_demo().strip().splitlines()[-1]
    assert last.startswith("export TOKEN=mcp_")
    assert last != f"export TOKEN={token}"  # a new run without a token file replaced it


@pytest.mark.django_db
def test_the_demo_person_can_sign_in_and_consent(client):
    """make run prints the OAuth URL and the demo user's password once; the user is a member of the demo
    tenant, so it may consent for OAuth clients of the demo server."""
    from mcp_app.models import TenantMembership

    first = json.loads(run_demo("--json"))["oauth"]
    assert first["password"]
    from django.http import HttpRequest

    # django-axes checks every authenticate() per address, so it needs the request (its documented test idiom).
    assert client.login(request=HttpRequest(), username="demo", password=first["password"])
    assert TenantMembership.objects.filter(user__username="demo", tenant__slug="demo").exists()
    assert json.loads(run_demo("--json"))["oauth"]["password"] is None  # printed once


@pytest.mark.django_db
def test_the_demo_person_opens_the_admin_and_reads_with_an_api_key(client):
    """The login ``make run`` prints is enough: no staff-group step; a viewer reads, and changes nothing."""
    from rest_framework.test import APIClient

    from mcp_app.models import ApiKey

    password = json.loads(run_demo("--json"))["oauth"]["password"]
    signed_in = client.post("/admin/login/?next=/admin/", {"username": "demo", "password": password})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
    tools = client.get("/admin/mcp_app/tool/")
    assert tools.status_code == 200 and "get_time" in tools.content.decode()
    assert client.get("/admin/mcp_app/tool/add/").status_code == 403
    _, raw = ApiKey.objects.issue_key(get_user_model().objects.get(username="demo"), name="demo")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    listed = api.get("/api/v1/tools/?page_size=100")
    assert listed.status_code == 200
    assert "echo" in {row["name"] for row in listed.json()["results"]}
