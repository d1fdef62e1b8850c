"""CRUD per resource as a tenant admin, with the answers checked against the database: defaults (the tenant),
validation through the models' own rules, tokens issued through the manager and shown once, revoke and
terminate through the models' verbs, pagination, filtering and the JSON error format."""

from __future__ import annotations

import pytest

from mcp_app.models import (
    Agent,
    AgentToken,
    McpServer,
    McpSession,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    Tool,
)


@pytest.fixture
def acme(two_tenants):
    return two_tenants[0]


@pytest.fixture
def admin(acme, key_client):
    return key_client(acme.users["admin"])


def test_servers_crud(acme, admin):
    created = admin.post(
        "/api/v1/servers/",
        {"server_id": "weather", "name": "Weather", "allowed_origins": ["https://app.example"]},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    server = McpServer.objects.get(server_id="weather")
    assert body["id"] == server.pk and body["endpoint"] == "/mcp/weather"
    assert server.tenant == acme.tenant  # defaulted: the admin writes in exactly one tenant
    url = f"/api/v1/servers/{server.pk}/"
    assert admin.get(url).json()["name"] == "Weather"
    assert admin.patch(url, {"title": "Weather service"}, format="json").status_code == 200
    full = {**admin.get(url).json(), "name": "Weather 2", "catalog_version": 999, "tenant": 12345}
    assert admin.put(url, full, format="json").status_code == 200
    server.refresh_from_db()
    assert (server.name, server.title, server.tenant_id) == ("Weather 2", "Weather service", acme.tenant.pk)
    assert server.catalog_version != 999  # read-only
    bad = admin.patch(url, {"protocol_versions": ["1999-01-01"]}, format="json")
    assert bad.status_code == 400 and "protocol_versions" in bad.json()["error"]["fields"]
    bad = admin.patch(url, {"allowed_origins": ["https://app.example/"]}, format="json")
    assert bad.status_code == 400 and "allowed_origins" in bad.json()["error"]["fields"]
    duplicate = admin.post("/api/v1/servers/", {"server_id": "weather", "name": "again"}, format="json")
    assert duplicate.status_code == 400 and "server_id" in duplicate.json()["error"]["fields"]
    assert admin.delete(url).status_code == 204
    assert not McpServer.objects.filter(pk=server.pk).exists()


def test_tools_are_validated_by_the_model_rules(acme, admin):
    bad_schema = admin.post(
        "/api/v1/tools/",
        {"name": "t1", "input_schema": {"type": "object", "properties": {"x": {"type": 12}}}},
        format="json",
    )
    assert bad_schema.status_code == 400 and "input_schema" in bad_schema.json()["error"]["fields"]
    unregistered = admin.post("/api/v1/tools/", {"name": "t2", "kind": "python", "python_name": "nope"}, format="json")
    assert unregistered.status_code == 400 and "python_name" in unregistered.json()["error"]["fields"]
    bad_static = admin.post("/api/v1/tools/", {"name": "t3", "static_result": {"content": "no"}}, format="json")
    assert bad_static.status_code == 400
    bad_name = admin.post("/api/v1/tools/", {"name": "has space", "static_result": {"content": []}}, format="json")
    assert bad_name.status_code == 400 and "name" in bad_name.json()["error"]["fields"]
    nul = admin.post("/api/v1/tools/", {"name": "t4", "static_result": {"content": ["\x00"]}}, format="json")
    assert nul.status_code == 400 and "static_result" in nul.json()["error"]["fields"]
    assert not Tool.objects.filter(name__in=["t1", "t2", "t3", "t4"]).exists()
    python = admin.post("/api/v1/tools/", {"name": "echo", "kind": "python"}, format="json")
    assert python.status_code == 201, python.content
    assert Tool.objects.get(pk=python.json()["id"]).python_name == "echo"  # completed by Tool.clean
    duplicate = admin.post("/api/v1/tools/", {"name": "echo", "kind": "python"}, format="json")
    assert duplicate.status_code == 400


def test_resources_and_prompts_crud(acme, admin):
    resource = admin.post(
        "/api/v1/resources/", {"uri": "file:///docs/{name}", "is_template": True, "name": "docs"}, format="json"
    )
    assert resource.status_code == 201, resource.content
    assert Resource.objects.get(pk=resource.json()["id"]).tenant == acme.tenant
    no_scheme = admin.post("/api/v1/resources/", {"uri": "docs", "name": "x"}, format="json")
    assert no_scheme.status_code == 400 and "uri" in no_scheme.json()["error"]["fields"]
    prompt = admin.post(
        "/api/v1/prompts/",
        {"name": "greet", "messages": [{"role": "user", "content": {"type": "text", "text": "hi {who}"}}]},
        format="json",
    )
    assert prompt.status_code == 201, prompt.content
    url = f"/api/v1/prompts/{prompt.json()['id']}/"
    assert admin.patch(url, {"description": "Greets"}, format="json").status_code == 200
    assert Prompt.objects.get(pk=prompt.json()["id"]).description == "Greets"
    assert admin.delete(url).status_code == 204
    assert admin.delete(f"/api/v1/resources/{resource.json()['id']}/").status_code == 204


def test_bindings_crud_bumps_the_catalog_version(acme, admin):
    tool = Tool.objects.create(tenant=acme.tenant, name="extra", static_result={"content": []})
    resource = Resource.objects.create(tenant=acme.tenant, uri="file:///extra", name="extra", text="x")
    prompt = Prompt.objects.create(tenant=acme.tenant, name="extra", messages=[])
    version = McpServer.objects.get(pk=acme.server.pk).catalog_version
    created = admin.post(
        "/api/v1/server-tools/", {"server": acme.server.pk, "tool": tool.pk, "name_override": "renamed"}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["exposed_name"] == "renamed"
    assert McpServer.objects.get(pk=acme.server.pk).catalog_version > version
    again = admin.post("/api/v1/server-tools/", {"server": acme.server.pk, "tool": tool.pk}, format="json")
    assert again.status_code == 400 and "tool" in again.json()["error"]["fields"]
    clash = admin.post(
        "/api/v1/server-tools/",
        {"server": acme.server.pk, "tool": Tool.objects.create(tenant=acme.tenant, name="renamed").pk},
        format="json",
    )
    assert clash.status_code == 400
    binding_url = f"/api/v1/server-tools/{created.json()['id']}/"
    assert admin.patch(binding_url, {"enabled": False}, format="json").status_code == 200
    assert ServerTool.objects.get(pk=created.json()["id"]).enabled is False
    assert admin.delete(binding_url).status_code == 204
    for endpoint, field, entry, model in (
        ("server-resources", "resource", resource, ServerResource),
        ("server-prompts", "prompt", prompt, ServerPrompt),
    ):
        made = admin.post(f"/api/v1/{endpoint}/", {"server": acme.server.pk, field: entry.pk}, format="json")
        assert made.status_code == 201, made.content
        assert model.objects.filter(pk=made.json()["id"], server=acme.server).exists()
        listed = admin.get(f"/api/v1/{endpoint}/?server={acme.server.pk}&{field}={entry.pk}").json()
        assert [item["id"] for item in listed["results"]] == [made.json()["id"]]


def test_agents_and_tokens(acme, admin):
    agent = admin.post("/api/v1/agents/", {"agent_id": "ci-bot", "name": "CI"}, format="json")
    assert agent.status_code == 201
    agent_pk = agent.json()["id"]
    assert Agent.objects.get(pk=agent_pk).tenant == acme.tenant
    created = admin.post(
        "/api/v1/tokens/", {"agent": agent_pk, "servers": [acme.server.pk], "name": "deploy"}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created["Cache-Control"] == "no-store"
    raw = created.json()["token"]
    token = AgentToken.objects.authenticate(raw)
    assert token is not None and token.pk == created.json()["id"]
    assert list(token.servers.all()) == [acme.server]
    url = f"/api/v1/tokens/{token.pk}/"
    detail = admin.get(url).json()
    assert "token" not in detail and "digest" not in detail and raw not in admin.get("/api/v1/tokens/").content.decode()
    digest = token.digest
    renamed = admin.patch(url, {"name": "deploy-2", "digest": "0" * 64, "prefix": "00000000"}, format="json")
    assert renamed.status_code == 200
    token.refresh_from_db()
    assert (token.name, token.digest) == ("deploy-2", digest)
    moved = admin.patch(url, {"agent": acme.agent.pk}, format="json")
    assert moved.status_code == 200 and AgentToken.objects.get(pk=token.pk).agent_id == agent_pk
    revoked = admin.post(f"{url}revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert revoked.json()["is_usable"] is False
    assert AgentToken.objects.authenticate(raw) is None
    filtered = admin.get("/api/v1/tokens/?revoked=true").json()["results"]
    assert [item["id"] for item in filtered] == [token.pk]
    assert admin.delete(url).status_code == 204


def test_sessions_are_read_and_terminated(acme, admin):
    url = f"/api/v1/sessions/{acme.session.pk}/"
    body = admin.get(url).json()
    assert body["server"] == acme.server.pk and body["terminated_at"] is None
    assert "digest" not in body
    assert admin.post("/api/v1/sessions/", {}, format="json").status_code == 405
    terminated = admin.post(f"{url}terminate/")
    assert terminated.status_code == 200 and terminated.json()["terminated_at"] is not None
    assert McpSession.objects.get(pk=acme.session.pk).terminated_at is not None
    live = admin.get("/api/v1/sessions/?terminated=false").json()
    assert live["results"] == []


def test_pagination_filtering_and_ordering(acme, admin):
    for index in range(5):
        Tool.objects.create(tenant=acme.tenant, name=f"bulk_{index}", static_result={"content": []})
    page = admin.get("/api/v1/tools/?page_size=2&ordering=-name").json()
    assert page["count"] == 6
    assert [tool["name"] for tool in page["results"]] == ["bulk_4", "bulk_3"]
    assert "page=2" in page["next"] and page["previous"] is None
    last = admin.get("/api/v1/tools/?page_size=2&page=3&ordering=-name").json()
    assert [tool["name"] for tool in last["results"]] == ["bulk_0", "acme_tool"]
    assert last["next"] is None
    assert admin.get("/api/v1/tools/?page=99").json()["error"]["code"] == "not_found"
    assert [tool["name"] for tool in admin.get("/api/v1/tools/?name=bulk_2").json()["results"]] == ["bulk_2"]
    assert admin.get("/api/v1/tools/?kind=python").json()["count"] == 0
    bad = admin.get("/api/v1/tools/?kind=nope")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "validation_error"
    assert admin.get("/api/v1/tools/?tenant=abc").status_code == 400
    assert admin.get("/api/v1/tools/?tenant=99999999999999999999999").status_code == 400


def test_errors_are_json_with_stable_codes(acme, admin):
    assert admin.get("/api/v1/tools/abc/").status_code == 404  # not a primary key: no route
    parse = admin.generic("POST", "/api/v1/tools/", "{not json", content_type="application/json")
    assert parse.status_code == 400 and parse.json()["error"]["code"] == "parse_error"
    media = admin.generic("POST", "/api/v1/tools/", "name=x", content_type="application/x-www-form-urlencoded")
    assert media.status_code == 415 and media.json()["error"]["code"] == "unsupported_media_type"
    method = admin.put("/api/v1/tools/", {}, format="json")
    assert method.status_code == 405 and method.json()["error"]["code"] == "method_not_allowed"
    invalid = admin.post("/api/v1/agents/", {"agent_id": "not a slug!"}, format="json")
    assert invalid.status_code == 400
    assert invalid.json()["error"]["code"] == "validation_error"
    assert set(invalid.json()["error"]["fields"]) == {"agent_id", "name"}


def test_tokens_carry_a_grant_of_their_agents_catalog(two_tenants, key_client):
    acme, globex = two_tenants
    admin = key_client(acme.users["admin"])
    created = admin.post(
        "/api/v1/tokens/",
        {"agent": acme.agent.pk, "servers": [acme.server.pk], "granted_tools": [acme.tool.pk], "read_only": True},
        format="json",
    )
    assert created.status_code == 201, created.content
    token = AgentToken.objects.get(pk=created.json()["id"])
    assert token.limit_to_grant is True and token.read_only is True
    assert list(token.granted_tools.all()) == [acme.tool]
    assert list(token.granted_prompts.all()) == []
    grant = AgentToken.objects.catalog_grant(token)
    assert grant.read_only is True
    foreign = admin.post("/api/v1/tokens/", {"agent": acme.agent.pk, "granted_tools": [globex.tool.pk]}, format="json")
    assert foreign.status_code == 400 and "granted_tools" in foreign.json()["error"]["fields"]
    widened = admin.patch(f"/api/v1/tokens/{token.pk}/", {"limit_to_grant": False}, format="json")
    assert widened.status_code == 200
    assert AgentToken.objects.get(pk=token.pk).limit_to_grant is False


def test_tool_calls_are_read_only_and_filtered(two_tenants, key_client):
    acme, _ = two_tenants
    viewer = key_client(acme.users["viewer"])
    listed = viewer.get(f"/api/v1/tool-calls/?tool={acme.tool.name}&status=ok").json()
    assert [call["id"] for call in listed["results"]] == [acme.tool_call.pk]
    call = listed["results"][0]
    assert call["arguments"] == {"city": "Paris", "api_key": "[redacted]"}
    assert call["token_prefix"] == acme.token.prefix
    assert viewer.get("/api/v1/tool-calls/?status=error").json()["count"] == 0
    assert viewer.get("/api/v1/tool-calls/?started_after=2999-01-01T00:00:00Z").json()["count"] == 0
    # Any offset is converted to UTC first (PostgreSQL refuses offsets beyond 15:59; found by the fuzz run).
    assert viewer.get("/api/v1/tool-calls/?started_before=0385-07-10T02:33:57-20:47").json()["count"] == 0
    overflow = viewer.get("/api/v1/tool-calls/?started_before=0001-01-01T00:00:00%2B10:00")
    assert overflow.status_code == 400 and overflow.json()["error"]["code"] == "validation_error"
    admin = key_client(acme.users["owner"])
    url = f"/api/v1/tool-calls/{acme.tool_call.pk}/"
    assert admin.patch(url, {"status": "error"}, format="json").status_code == 405
    assert admin.delete(url).status_code == 405


def test_an_agents_worker_call_limit_is_written_through_the_api_and_its_tenants_is_only_shown(acme, admin):
    Tenant.objects.filter(pk=acme.tenant.pk).update(max_worker_calls=5)
    url = f"/api/v1/agents/{acme.agent.pk}/"
    assert admin.get(url).json()["max_worker_calls"] is None  # the WORKER_CALLS_PER_AGENT setting applies
    changed = admin.patch(url, {"max_worker_calls": 2}, format="json")
    assert changed.status_code == 200 and changed.json()["max_worker_calls"] == 2
    assert Agent.objects.get(pk=acme.agent.pk).max_worker_calls == 2
    negative = admin.patch(url, {"max_worker_calls": -1}, format="json")
    assert negative.status_code == 400 and "max_worker_calls" in negative.json()["error"]["fields"]

    tenant_url = f"/api/v1/tenants/{acme.tenant.pk}/"
    assert admin.get(tenant_url).json()["max_worker_calls"] == 5
    admin.patch(tenant_url, {"max_worker_calls": 500}, format="json")  # not the tenant's to raise
    assert Tenant.objects.get(pk=acme.tenant.pk).max_worker_calls == 5


def test_rate_limits_of_agents_and_tools_are_written_through_the_api_and_a_tenants_is_only_shown(acme, admin):
    from mcp_app.models import Tool

    Tenant.objects.filter(pk=acme.tenant.pk).update(rate_limit=50.0)
    url = f"/api/v1/agents/{acme.agent.pk}/"
    assert admin.get(url).json()["rate_limit"] is None  # the RATE_LIMIT_PER_AGENT setting applies
    changed = admin.patch(url, {"rate_limit": 2.5, "rate_burst": 5}, format="json")
    assert changed.status_code == 200 and (changed.json()["rate_limit"], changed.json()["rate_burst"]) == (2.5, 5)
    assert Agent.objects.get(pk=acme.agent.pk).rate_limit == 2.5
    negative = admin.patch(url, {"rate_limit": -1, "rate_burst": 0}, format="json")
    assert negative.status_code == 400 and {"rate_limit", "rate_burst"} <= set(negative.json()["error"]["fields"])

    tool = Tool.objects.filter(tenant=acme.tenant).first()
    tool_url = f"/api/v1/tools/{tool.pk}/"
    assert admin.patch(tool_url, {"rate_limit": 1, "rate_burst": 2}, format="json").status_code == 200
    assert Tool.objects.get(pk=tool.pk).rate_limit == 1

    tenant_url = f"/api/v1/tenants/{acme.tenant.pk}/"
    assert admin.get(tenant_url).json()["rate_limit"] == 50.0
    admin.patch(tenant_url, {"rate_limit": 5000}, format="json")  # the operator's, not the tenant's
    assert Tenant.objects.get(pk=acme.tenant.pk).rate_limit == 50.0
