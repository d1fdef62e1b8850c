"""``/api/v1/upstreams/``: CRUD with a first sync against a real upstream MCP server, write-only secrets, the
``sync``, ``test``, ``bind`` and ``unbind`` actions, and the isolation of tenants (another tenant's staff get 404
on everything, a server of another tenant is never bound).

Answers are checked against the database and against the catalog a server resolves for its clients.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import McpServer, Tool, Upstream, UpstreamBinding
from tests.federation.upstream_server import UpstreamProcess
from tests.upstreams import TOKEN, UPSTREAM_PROMPTS, UPSTREAM_RESOURCES, UPSTREAM_TOOLS

from .conftest import ROLES

OAUTH_SECRET = "oauth-client-secret-91c2"


@pytest.fixture
def acme(two_tenants):
    return two_tenants[0]


@pytest.fixture
def globex(two_tenants):
    return two_tenants[1]


@pytest.fixture
def admin(acme, key_client):
    return key_client(acme.users["admin"])


def exposed_tools(server: McpServer) -> list[str]:
    return sorted(tool["name"] for tool in resolve_catalog(McpServer.objects.get(pk=server.pk)).wire("tools"))


def register(client: Any, upstream: UpstreamProcess, **fields: Any) -> Any:
    body = {"name": "docs", "url": upstream.url, "prefix": "gh_", "secret_headers": {"Authorization": TOKEN}, **fields}
    return client.post("/api/v1/upstreams/", body, format="json")


def stored(upstream: Upstream) -> str:
    """Every column of the row as the database holds it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {Upstream._meta.db_table} WHERE id = %s", [upstream.pk])
        return repr(cursor.fetchone())


def test_create_runs_the_first_sync_and_never_returns_secrets(acme, admin, protected_upstream: UpstreamProcess):
    response = register(admin, protected_upstream)
    assert response.status_code == 201, response.content
    body = response.json()
    upstream = Upstream.objects.get(name="docs")
    assert body["id"] == upstream.pk and body["tenant"] == acme.tenant.pk  # defaulted: one writable tenant
    assert body["sync"] == {
        "ok": True,
        "error": "",
        "added": [
            *(f"gh_{name}" for name in UPSTREAM_TOOLS),
            "note://readme",
            "note://items/{id}",
            *(f"prompt gh_{name}" for name in UPSTREAM_PROMPTS),
        ],
        "updated": [],
        "removed": [],
        "skipped": [],
        "flagged": [],
    }
    assert body["entries"] == {
        "tools": len(UPSTREAM_TOOLS),
        "resources": len(UPSTREAM_RESOURCES),
        "prompts": len(UPSTREAM_PROMPTS),
    }
    assert body["sync_status"] == "ok" and body["last_synced_at"]
    assert body["server_info"]["name"] == "upstream"
    assert body["secret_headers"] == {"Authorization": "set"}
    assert body["oauth_client_secret_set"] is False
    assert "oauth_client_secret" not in body
    assert "upstream-secret" not in response.content.decode()
    assert upstream.reveal_secret_headers() == {"Authorization": TOKEN}
    assert "upstream-secret" not in stored(upstream)
    assert sorted(Tool.objects.filter(upstream=upstream).values_list("name", flat=True)) == sorted(
        f"gh_{name}" for name in UPSTREAM_TOOLS
    )


def test_a_failed_first_sync_is_a_400_and_saves_nothing(acme, admin, protected_upstream: UpstreamProcess):
    response = register(admin, protected_upstream, secret_headers={})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["fields"]["non_field_errors"][0].startswith("the first sync failed, nothing was registered:")
    assert not Upstream.objects.exists() and not Tool.objects.filter(kind="upstream").exists()


def test_invalid_configuration_is_a_400_per_field(acme, admin, settings):
    settings.MCP_APP = {**settings.MCP_APP, "HTTP_TOOL_ALLOWED_NETWORKS": []}
    cases = [
        ({"url": "ftp://mcp.example.com/"}, "url"),
        ({"url": "http://10.0.0.7/mcp"}, "url"),
        ({"prefix": "no spaces"}, "prefix"),
        ({"name": "Upper Case"}, "name"),
        ({"secret_headers": {"Host": "x"}}, "secret_headers"),
        ({"secret_headers": ["not", "an", "object"]}, "secret_headers"),
        ({"headers": {"Authorization": "plain"}, "secret_headers": {"Authorization": "x"}}, "headers"),
        ({"oauth_client_id": "client"}, "oauth_client_id"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"era": "2024-11-05"}, "era"),
    ]
    for fields, field in cases:
        body = {"name": "docs", "url": "https://mcp.example.com/mcp", **fields}
        response = admin.post("/api/v1/upstreams/", body, format="json")
        assert response.status_code == 400, (fields, response.content)
        assert field in response.json()["error"]["fields"], (fields, response.json())
    assert not Upstream.objects.exists()


def test_update_keeps_or_replaces_write_only_secrets(acme, admin):
    upstream = Upstream(tenant=acme.tenant, name="docs", url="https://mcp.example.com/mcp")
    upstream.set_secret_headers({"Authorization": TOKEN})
    upstream.save()
    url = f"/api/v1/upstreams/{upstream.pk}/"

    response = admin.patch(
        url,
        {
            "prefix": "d_",
            "oauth_client_id": "client",
            "oauth_client_secret": OAUTH_SECRET,
            "oauth_issuer": "https://auth.example.com",
        },
        format="json",
    )
    assert response.status_code == 400  # OAuth and an Authorization secret header: not both
    response = admin.patch(
        url,
        {
            "secret_headers": {"X-Api-Key": "k-123"},
            "oauth_client_id": "client",
            "oauth_client_secret": OAUTH_SECRET,
            "oauth_issuer": "https://auth.example.com",
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["secret_headers"] == {"X-Api-Key": "set"}
    assert response.json()["oauth_client_secret_set"] is True
    upstream.refresh_from_db()
    assert upstream.reveal_secret_headers() == {"X-Api-Key": "k-123"}
    assert upstream.reveal_oauth_client_secret() == OAUTH_SECRET
    assert OAUTH_SECRET not in stored(upstream)

    # A PUT of what GET shows (no secret values in it) keeps the secrets.
    shown = admin.get(url).json()
    assert OAUTH_SECRET not in str(shown) and "k-123" not in str(shown)
    assert admin.put(url, {**shown, "prefix": "e_"}, format="json").status_code == 200
    upstream.refresh_from_db()
    assert (upstream.prefix, upstream.reveal_secret_headers()) == ("e_", {"X-Api-Key": "k-123"})
    assert upstream.reveal_oauth_client_secret() == OAUTH_SECRET

    # "set" keeps a stored value while another header is added.
    response = admin.patch(url, {"secret_headers": {"X-Api-Key": "set", "X-Team": "t-1"}}, format="json")
    assert response.json()["secret_headers"] == {"X-Api-Key": "set", "X-Team": "set"}
    upstream.refresh_from_db()
    assert upstream.reveal_secret_headers() == {"X-Api-Key": "k-123", "X-Team": "t-1"}

    # {} and "" remove them.
    response = admin.patch(url, {"secret_headers": {}, "oauth_client_id": "", "oauth_client_secret": ""}, format="json")
    assert response.status_code == 200, response.content
    upstream.refresh_from_db()
    assert upstream.reveal_secret_headers() == {} and upstream.oauth_client_secret_encrypted == ""
    assert admin.delete(url).status_code == 204
    assert not Upstream.objects.exists()


def test_sync_test_bind_and_unbind(acme, admin, protected_upstream: UpstreamProcess):
    upstream_id = register(admin, protected_upstream).json()["id"]
    url = f"/api/v1/upstreams/{upstream_id}/"
    server = acme.server

    bound = admin.post(f"{url}bind/", {"server": server.pk}, format="json")
    assert bound.status_code == 200, bound.content
    assert bound.json() == {"server": server.pk, "servers": [server.pk], "skipped": []}
    assert "gh_echo" in exposed_tools(server)
    assert admin.get(url).json()["servers"] == [server.pk]

    protected_upstream.add_tool("lookup")
    probe = admin.post(f"{url}test/")
    assert probe.status_code == 200
    assert probe.json()["ok"] is True and probe.json()["offers"]["tools"] == [*UPSTREAM_TOOLS, "lookup"]
    assert probe.json()["protocol_version"] and probe.json()["server_info"]["name"] == "upstream"
    assert not Tool.objects.filter(name="gh_lookup").exists()  # a test writes nothing

    synced = admin.post(f"{url}sync/")
    assert synced.status_code == 200
    assert synced.json()["added"] == ["gh_lookup"] and synced.json()["ok"] is True
    assert {"gh_echo", "gh_lookup"} <= set(exposed_tools(server))

    unbound = admin.post(f"{url}unbind/", {"server": server.pk}, format="json")
    assert unbound.json() == {"server": server.pk, "servers": [], "skipped": []}
    assert not {"gh_echo", "gh_lookup"} & set(exposed_tools(server))
    assert not UpstreamBinding.objects.exists()


def test_a_failing_upstream_syncs_and_tests_as_200_with_ok_false(acme, admin, protected_upstream: UpstreamProcess):
    upstream_id = register(admin, protected_upstream).json()["id"]
    Upstream.objects.filter(pk=upstream_id).update(url=protected_upstream.url.replace("/mcp", "/gone"))
    url = f"/api/v1/upstreams/{upstream_id}/"
    for action in ("test", "sync"):
        response = admin.post(f"{url}{action}/")
        assert response.status_code == 200
        assert response.json()["ok"] is False and response.json()["error"]
    shown = admin.get(url).json()
    assert shown["sync_status"] == "error" and shown["last_sync_error"] == response.json()["error"]
    assert shown["entries"] == {  # kept as they were
        "tools": len(UPSTREAM_TOOLS),
        "resources": len(UPSTREAM_RESOURCES),
        "prompts": len(UPSTREAM_PROMPTS),
    }


# Isolation -------------------------------------------------------------------------------------------------------


@pytest.fixture
def globex_upstream(globex):
    upstream = Upstream(tenant=globex.tenant, name="theirs", url="https://mcp.globex.example/mcp", prefix="g_")
    upstream.set_secret_headers({"Authorization": "Bearer globex"})
    upstream.save()
    return upstream


@pytest.mark.parametrize("role", ROLES)
def test_another_tenants_staff_cannot_see_or_touch_an_upstream(acme, globex, globex_upstream, key_client, role):
    client = key_client(acme.users[role])
    before = stored(globex_upstream)
    listed = client.get("/api/v1/upstreams/?page_size=500").json()["results"]
    assert globex_upstream.pk not in {item["id"] for item in listed}
    assert client.get(f"/api/v1/upstreams/?tenant={globex.tenant.pk}").json()["results"] == []
    url = f"/api/v1/upstreams/{globex_upstream.pk}/"
    missing = "/api/v1/upstreams/10000000/"
    answers = [
        (client.get(url), client.get(missing)),
        (client.patch(url, {"prefix": "x_"}, format="json"), client.patch(missing, {"prefix": "x_"}, format="json")),
        (client.put(url, {"name": "x"}, format="json"), client.put(missing, {"name": "x"}, format="json")),
        (client.delete(url), client.delete(missing)),
    ]
    for action in ("sync", "test", "bind", "unbind"):
        body = {"server": acme.server.pk}
        answers.append(
            (
                client.post(f"{url}{action}/", body, format="json"),
                client.post(f"{missing}{action}/", body, format="json"),
            )
        )
    for foreign, absent in answers:
        assert foreign.status_code == 404, foreign.content
        assert (foreign.status_code, foreign.content) == (absent.status_code, absent.content)
    assert stored(globex_upstream) == before
    assert not UpstreamBinding.objects.exists()


def test_viewers_read_but_change_nothing(acme, key_client):
    upstream = Upstream.objects.create(tenant=acme.tenant, name="docs", url="https://mcp.example.com/mcp")
    viewer = key_client(acme.users["viewer"])
    url = f"/api/v1/upstreams/{upstream.pk}/"
    assert viewer.get(url).status_code == 200
    for response in (
        viewer.post("/api/v1/upstreams/", {"name": "new", "url": "https://mcp.example.com/mcp"}, format="json"),
        viewer.patch(url, {"prefix": "x_"}, format="json"),
        viewer.delete(url),
        viewer.post(f"{url}sync/"),
        viewer.post(f"{url}test/"),
        viewer.post(f"{url}bind/", {"server": acme.server.pk}, format="json"),
    ):
        assert response.status_code == 403, response.content
    assert Upstream.objects.get().prefix == "" and not UpstreamBinding.objects.exists()


def test_an_upstream_is_never_created_in_or_bound_to_another_tenant(acme, globex, admin, key_client, member_factory):
    upstream = Upstream.objects.create(tenant=acme.tenant, name="docs", url="https://mcp.example.com/mcp")
    url = f"/api/v1/upstreams/{upstream.pk}/"
    # A tenant where the admin has no role: its server is as unknown as a missing one.
    foreign = admin.post(f"{url}bind/", {"server": globex.server.pk}, format="json")
    absent = admin.post(f"{url}bind/", {"server": 10_000_000}, format="json")
    assert foreign.status_code == absent.status_code == 400
    assert foreign.content.decode() == absent.content.decode().replace("10000000", str(globex.server.pk))
    created = admin.post(
        "/api/v1/upstreams/",
        {"tenant": globex.tenant.pk, "name": "x", "url": "https://mcp.example.com/mcp"},
        format="json",
    )
    assert created.status_code == 400 and "tenant" in created.json()["error"]["fields"]
    # An admin of both tenants: the server is found, and refused.
    both = key_client(member_factory((acme.tenant, "admin"), (globex.tenant, "admin")))
    refused = both.post(f"{url}bind/", {"server": globex.server.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"server": ["The upstream and the server belong to different tenants."]}
    assert not UpstreamBinding.objects.exists()
    assert Upstream.objects.filter(tenant=globex.tenant).count() == 0


def test_the_era_is_read_and_written(acme, admin):
    upstream = Upstream.objects.create(tenant=acme.tenant, name="docs", url="https://mcp.example.com/mcp")
    url = f"/api/v1/upstreams/{upstream.pk}/"

    before = admin.get(url).json()["era"]
    changed = admin.patch(url, {"era": "2025-11-25"}, format="json")

    assert (before, changed.status_code, changed.json()["era"]) == ("auto", 200, "2025-11-25")
    upstream.refresh_from_db()
    assert upstream.era == "2025-11-25"


def test_the_change_policy_is_read_and_written_and_checked(acme, admin):
    upstream = Upstream.objects.create(tenant=acme.tenant, name="docs", url="https://mcp.example.com/mcp")
    url = f"/api/v1/upstreams/{upstream.pk}/"

    before = admin.get(url).json()["on_change"]
    changed = admin.patch(url, {"on_change": "block"}, format="json")
    refused = admin.patch(url, {"on_change": "ignore"}, format="json")

    assert (before, changed.status_code, changed.json()["on_change"]) == ("hold", 200, "block")
    assert refused.status_code == 400 and list(refused.json()["error"]["fields"]) == ["on_change"]
    upstream.refresh_from_db()
    assert upstream.on_change == "block"
