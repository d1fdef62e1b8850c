"""The admin of upstream MCP servers, against a real upstream (the SDK's ``MCPServer`` in its own process):
registering with a first sync, write-only secrets, whole-server bindings, the imported entries, the buttons
(sync, test, close breaker) and their tenant scoping. The isolation matrix of every admin page (including this
one's) is ``test_isolation``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import McpServer, Tool, Upstream, UpstreamBinding
from tests.federation.upstream_server import UpstreamProcess
from tests.upstreams import TOKEN, UPSTREAM_PROMPTS, UPSTREAM_TOOLS

OAUTH_SECRET = "oauth-secret-in-the-admin-5d1e"
# What the harness upstream brings: its tools, two resources (one a template) and its prompts.
ADDED = len(UPSTREAM_TOOLS) + 2 + len(UPSTREAM_PROMPTS)


def form(tenant: Any, url: str, *, servers: tuple[Any, ...] = (), **fields: Any) -> dict[str, Any]:
    data = {
        "tenant": tenant.pk,
        "name": "docs",
        "url": url,
        "prefix": "gh_",
        "enabled": "on",
        "headers": "{}",
        "secret_headers": f"Authorization: {TOKEN}",
        "oauth_client_id": "",
        "oauth_client_secret": "",
        "oauth_issuer": "",
        "oauth_scope": "",
        "timeout_seconds": "",
        "sync_interval_seconds": "",
        "bindings-TOTAL_FORMS": str(len(servers)),
        "bindings-INITIAL_FORMS": "0",
        "bindings-MIN_NUM_FORMS": "0",
        "bindings-MAX_NUM_FORMS": "1000",
        **fields,
    }
    for index, server in enumerate(servers):
        data[f"bindings-{index}-server"] = server.pk
    return data


def said(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def exposed_tools(server: McpServer) -> list[str]:
    return sorted(tool["name"] for tool in resolve_catalog(McpServer.objects.get(pk=server.pk)).wire("tools"))


def button(name: str, upstream: Upstream) -> str:
    return reverse(f"admin:mcp_app_upstream_{name}", args=[upstream.pk])


@pytest.fixture
def registered(globex, login, protected_upstream: UpstreamProcess) -> Upstream:
    client = login(globex.users["admin"])
    response = client.post(
        reverse("admin:mcp_app_upstream_add"),
        form(globex.tenant, protected_upstream.url, servers=(globex.access.server,)),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    return Upstream.objects.get(tenant=globex.tenant, name="docs")


def test_adding_an_upstream_syncs_binds_and_never_shows_the_secret(globex, login, protected_upstream: UpstreamProcess):
    client = login(globex.users["admin"])
    server = globex.access.server
    response = client.post(
        reverse("admin:mcp_app_upstream_add"),
        form(globex.tenant, protected_upstream.url, servers=(server,)),
        follow=True,
    )
    assert response.status_code == 200
    messages = said(response)
    assert any(m.startswith(f"First sync of docs: {ADDED} added: gh_echo, gh_add") for m in messages), messages
    upstream = Upstream.objects.get(name="docs")
    assert upstream.reveal_secret_headers() == {"Authorization": TOKEN}
    assert list(UpstreamBinding.objects.filter(upstream=upstream).values_list("server", flat=True)) == [server.pk]
    assert "gh_echo" in exposed_tools(server)

    page = client.get(reverse("admin:mcp_app_upstream_change", args=[upstream.pk])).content.decode()
    assert "Set: Authorization." in page
    assert "upstream-secret" not in page and upstream.secret_headers_encrypted not in page
    tool = Tool.objects.get(upstream=upstream, remote_name="echo")
    assert reverse("admin:mcp_app_tool_change", args=[tool.pk]) in page  # the imported entries, linked
    assert client.get(reverse("admin:mcp_app_tool_change", args=[tool.pk])).status_code == 200
    assert "upstream 1.0" in page  # the upstream's server info
    for name in ("sync", "test", "close_breaker"):
        assert f'action="{button(name, upstream)}"' in page


def test_a_failed_first_sync_is_kept_with_its_error(globex, login, protected_upstream: UpstreamProcess):
    client = login(globex.users["admin"])
    response = client.post(
        reverse("admin:mcp_app_upstream_add"),
        form(globex.tenant, protected_upstream.url, secret_headers=""),
        follow=True,
    )
    assert any(m.startswith("First sync of docs failed:") for m in said(response))
    upstream = Upstream.objects.get(name="docs")
    assert upstream.last_sync_error and not Tool.objects.filter(upstream=upstream).exists()
    listing = client.get(reverse("admin:mcp_app_upstream_changelist")).content.decode()
    assert upstream.last_sync_error[:40] in listing


def test_oauth_client_secret_is_write_only(globex, login):
    client = login(globex.users["admin"])
    upstream = Upstream.objects.create(tenant=globex.tenant, name="docs", url="https://mcp.example.com/mcp")
    url = reverse("admin:mcp_app_upstream_change", args=[upstream.pk])
    data = form(
        globex.tenant,
        upstream.url,
        secret_headers="",
        oauth_client_id="client",
        oauth_issuer="https://auth.example.com",
    )
    response = client.post(url, {**data, "oauth_client_secret": OAUTH_SECRET})
    assert response.status_code == 302, response.content.decode()[:3000]
    upstream.refresh_from_db()
    assert upstream.reveal_oauth_client_secret() == OAUTH_SECRET
    page = client.get(url).content.decode()
    assert OAUTH_SECRET not in page and "Set. Stored encrypted" in page
    # Saving with the field empty keeps it; "remove" (with the client id emptied) clears it.
    assert client.post(url, data).status_code == 302
    upstream.refresh_from_db()
    assert upstream.reveal_oauth_client_secret() == OAUTH_SECRET
    response = client.post(url, {**data, "oauth_client_id": "", "clear_oauth_client_secret": "on"})
    assert response.status_code == 302
    upstream.refresh_from_db()
    assert upstream.oauth_client_secret_encrypted == ""
    # Errors never echo what was typed.
    response = client.post(url, {**data, "url": "ftp://nope.example.com/", "oauth_client_secret": OAUTH_SECRET})
    assert response.status_code == 200 and OAUTH_SECRET not in response.content.decode()


def test_sync_now_test_connection_and_close_breaker(
    globex, login, registered: Upstream, protected_upstream: UpstreamProcess
):
    client = login(globex.users["admin"])
    server = globex.access.server
    protected_upstream.add_tool("lookup")

    assert client.get(button("sync", registered)).status_code == 405  # buttons change things: POST only
    tested = client.post(button("test", registered), follow=True)
    message = " ".join(said(tested))
    assert "docs answers: upstream 1.0" in message and f"{len(UPSTREAM_TOOLS) + 1} tools (" in message
    assert not Tool.objects.filter(name="gh_lookup").exists()

    synced = client.post(button("sync", registered), follow=True)
    assert "Sync of docs: 1 added: gh_lookup; 0 updated; 0 removed." in said(synced)
    assert "gh_lookup" in exposed_tools(server)

    closed = client.post(button("close_breaker", registered), follow=True)
    assert "The circuit breaker of docs is closed: calls go through again." in said(closed)

    listing = client.get(reverse("admin:mcp_app_upstream_changelist")).content.decode()
    assert protected_upstream.url in listing and ">closed<" in listing.replace(" ", "")


def test_list_actions_sync_and_test(globex, login, registered: Upstream, protected_upstream: UpstreamProcess):
    client = login(globex.users["admin"])
    protected_upstream.add_tool("extra")
    changelist = reverse("admin:mcp_app_upstream_changelist")
    response = client.post(changelist, {"action": "sync_now", "_selected_action": [registered.pk]}, follow=True)
    assert "Sync of docs: 1 added: gh_extra; 0 updated; 0 removed." in said(response)
    response = client.post(changelist, {"action": "test_connection", "_selected_action": [registered.pk]}, follow=True)
    assert any("docs answers:" in m for m in said(response))
    response = client.post(changelist, {"action": "close_breaker", "_selected_action": [registered.pk]}, follow=True)
    assert "Closed the circuit breaker of 1 upstream(s)." in said(response)


def test_removing_a_binding_in_the_inline_unbinds_the_entries(globex, login, registered: Upstream):
    client = login(globex.users["admin"])
    server = globex.access.server
    binding = UpstreamBinding.objects.get(upstream=registered)
    data = form(globex.tenant, registered.url, secret_headers="")
    data.update(
        {
            "bindings-TOTAL_FORMS": "1",
            "bindings-INITIAL_FORMS": "1",
            "bindings-0-id": binding.pk,
            "bindings-0-upstream": registered.pk,
            "bindings-0-server": server.pk,
            "bindings-0-DELETE": "on",
        }
    )
    response = client.post(reverse("admin:mcp_app_upstream_change", args=[registered.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert not UpstreamBinding.objects.filter(upstream=registered).exists()
    assert "gh_echo" not in exposed_tools(server)
    assert registered.reveal_secret_headers() == {"Authorization": TOKEN}  # kept: the field was left empty


# Tenant scoping of the buttons and the bindings -----------------------------------------------------------------


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_buttons_on_another_tenants_upstream_are_404(acme, globex, login, role):
    theirs = acme["upstream"]
    client = login(globex.users[role])
    for name in ("sync", "test", "close_breaker"):
        assert client.post(button(name, theirs)).status_code == 404, name
    assert Upstream.objects.get(pk=theirs.pk).last_sync_error == ""


def test_viewers_press_no_buttons(globex, login):
    mine = globex["upstream"]
    client = login(globex.users["viewer"])
    page = client.get(reverse("admin:mcp_app_upstream_change", args=[mine.pk])).content.decode()
    assert button("sync", mine) not in page
    for name in ("sync", "test", "close_breaker"):
        assert client.post(button(name, mine)).status_code == 403, name
    assert Upstream.objects.get(pk=mine.pk).last_sync_error == ""


def test_a_server_of_another_tenant_cannot_be_bound(acme, globex, login, member_factory):
    both = member_factory((acme.tenant, "admin"), (globex.tenant, "admin"))
    client = login(both)
    mine = globex["upstream"]
    UpstreamBinding.objects.filter(upstream=mine).delete()
    data = form(globex.tenant, mine.url, servers=(acme.access.server,), secret_headers="", name=mine.name)
    response = client.post(reverse("admin:mcp_app_upstream_change", args=[mine.pk]), data)
    assert response.status_code == 200
    assert not UpstreamBinding.objects.filter(upstream=mine).exists()
    # Nor while registering one: the upstream is not saved yet when its bindings are checked.
    data = form(globex.tenant, mine.url, servers=(acme.access.server,), secret_headers="", name="other")
    response = client.post(reverse("admin:mcp_app_upstream_add"), data)
    assert response.status_code == 200 and "belong to different tenants" in response.content.decode()
    assert not Upstream.objects.filter(name="other").exists()


def test_the_sidebar_offers_upstreams_under_catalog(globex, login):
    from mcp_app.admin.theme import sidebar

    client = login(globex.users["viewer"])
    request = client.get(reverse("admin:index")).wsgi_request
    catalog = next(group for group in sidebar(request) if group["title"] == "Catalog")
    assert reverse("admin:mcp_app_upstream_changelist") in [item["link"] for item in catalog["items"]]


def test_an_imported_entry_links_to_its_upstream_and_shows_its_schema(globex, login, registered: Upstream):
    client = login(globex.users["admin"])
    tool = Tool.objects.get(upstream=registered, remote_name="add")
    assert tool.input_schema and "a" in tool.input_schema["properties"]
    page = client.get(reverse("admin:mcp_app_tool_change", args=[tool.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert f'href="{reverse("admin:mcp_app_upstream_change", args=[registered.pk])}"' in text
    assert '"properties"' in text and 'name="input_schema"' not in text  # shown, not editable
    for model, entry in (("resource", registered.resources.first()), ("prompt", registered.prompts.first())):
        shown = client.get(reverse(f"admin:mcp_app_{model}_change", args=[entry.pk])).content.decode()
        assert reverse("admin:mcp_app_upstream_change", args=[registered.pk]) in shown


def test_an_upstream_entry_cannot_be_made_by_hand(globex, login):
    from rest_framework.test import APIClient

    from mcp_app.models import ApiKey

    client = login(globex.users["admin"])
    add = reverse("admin:mcp_app_tool_add")
    assert 'value="upstream"' not in client.get(add).content.decode()
    response = client.post(add, {"tenant": globex.tenant.pk, "name": "hand_made", "kind": "upstream"})
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    _, raw = ApiKey.objects.issue_key(globex.users["admin"], name="t")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"tenant": globex.tenant.pk, "name": "hand_made", "kind": "upstream"}
    answer = api.post("/api/v1/tools/", body, format="json")
    assert answer.status_code == 400 and "kind" in answer.json()["error"]["fields"], answer.content
    assert not Tool.objects.filter(name="hand_made").exists()


def test_the_change_policy_is_chosen_in_the_form_and_hold_when_left_out(
    globex, login, protected_upstream: UpstreamProcess
):
    client = login(globex.users["admin"])
    blocked = client.post(
        reverse("admin:mcp_app_upstream_add"), form(globex.tenant, protected_upstream.url, on_change="block")
    )
    held = client.post(
        reverse("admin:mcp_app_upstream_add"), form(globex.tenant, protected_upstream.url, name="plain", prefix="p_")
    )

    assert (blocked.status_code, held.status_code) == (302, 302)
    added = Upstream.objects.filter(tenant=globex.tenant, name__in=("docs", "plain"))
    assert dict(added.values_list("name", "on_change")) == {"docs": "block", "plain": "hold"}
