"""The API side of the isolation matrix: two tenants (acme, globex), each with an owner, an admin, a viewer, an
agent, a token and one of every object. Every endpoint and method is tried across the boundary and by each
role: nothing of the other tenant is listed, read, changed, deleted or referenced; viewers change nothing;
only owners manage memberships. Expected values come from the fixtures, never from the API's own answers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from mcp_app.models import (
    AgentToken,
    McpSession,
    Prompt,
    Resource,
    Tenant,
    TenantMembership,
    Tool,
    Upstream,
)
from tests.conftest import catalog_records

from .conftest import ENDPOINTS as WORLD_ENDPOINTS
from .conftest import ROLES

# Catalog versions and held upstream changes: records of a server, added to each world by ``matrix``.
RECORDS = ("catalog-versions", "catalog-changes")
ENDPOINTS = (*WORLD_ENDPOINTS, *RECORDS)
READ_ONLY = ("tenants", "sessions", "tool-calls", "approvals", *RECORDS)
WRITABLE = tuple(e for e in ENDPOINTS if e not in READ_ONLY)
ACTIONS = {"tokens": "revoke", "sessions": "terminate", "approvals": "approve"}

# A harmless change per endpoint, for PATCH (and PUT, merged over the object's current representation).
PATCHES: dict[str, dict[str, Any]] = {
    "memberships": {"role": "admin"},
    "servers": {"title": "changed"},
    "tools": {"title": "changed"},
    "resources": {"title": "changed"},
    "prompts": {"title": "changed"},
    "server-tools": {"position": 7},
    "server-resources": {"position": 7},
    "server-prompts": {"position": 7},
    "agents": {"name": "changed"},
    "tokens": {"name": "changed"},
}


def _fresh_entries(world: Any) -> dict[str, Any]:
    """Unbound catalog entries of ``world``'s tenant, so that a new binding is valid."""
    tenant = world.tenant
    return {
        "tool": Tool.objects.create(tenant=tenant, name=f"spare_{tenant.slug}", static_result={"content": []}),
        "resource": Resource.objects.create(tenant=tenant, uri=f"file:///spare/{tenant.slug}", name="s", text="s"),
        "prompt": Prompt.objects.create(tenant=tenant, name=f"spare_{tenant.slug}", messages=[]),
    }


def create_payload(endpoint: str, world: Any, spare: dict[str, Any], newcomer: Any) -> dict[str, Any]:
    """A valid create body for ``endpoint`` inside ``world``'s tenant."""
    t = world.tenant.pk
    return {
        "memberships": {"tenant": t, "user": newcomer.username, "role": "viewer"},
        "servers": {"tenant": t, "server_id": f"new-{world.tenant.slug}", "name": "new"},
        "tools": {"tenant": t, "name": "new_tool", "static_result": {"content": []}},
        "resources": {"tenant": t, "uri": "file:///new.md", "name": "new", "text": "x"},
        "prompts": {
            "tenant": t,
            "name": "new_prompt",
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        },
        "server-tools": {"server": world.server.pk, "tool": spare["tool"].pk},
        "server-resources": {"server": world.server.pk, "resource": spare["resource"].pk},
        "server-prompts": {"server": world.server.pk, "prompt": spare["prompt"].pk},
        "agents": {"tenant": t, "agent_id": f"new-{world.tenant.slug}", "name": "new"},
        "tokens": {"agent": world.agent.pk, "servers": [world.server.pk]},
    }[endpoint]


def foreign_variants(endpoint: str, mine: Any, theirs: Any, spare_theirs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(field, foreign id) pairs: each replaces one foreign key of my valid payload by the other tenant's."""
    return {
        "memberships": [("tenant", theirs.tenant.pk)],
        "servers": [("tenant", theirs.tenant.pk)],
        "tools": [("tenant", theirs.tenant.pk)],
        "resources": [("tenant", theirs.tenant.pk)],
        "prompts": [("tenant", theirs.tenant.pk)],
        "agents": [("tenant", theirs.tenant.pk)],
        "server-tools": [("server", theirs.server.pk), ("tool", spare_theirs["tool"].pk)],
        "server-resources": [("server", theirs.server.pk), ("resource", spare_theirs["resource"].pk)],
        "server-prompts": [("server", theirs.server.pk), ("prompt", spare_theirs["prompt"].pk)],
        "tokens": [("agent", theirs.agent.pk), ("servers", [theirs.server.pk])],
    }[endpoint]


def model_of(world: Any, endpoint: str) -> type:
    return type(world.objects[endpoint])


def snapshot(obj: Any) -> dict[str, Any]:
    """Every concrete column of ``obj`` as stored now (None if the row is gone)."""
    row = type(obj)._default_manager.filter(pk=obj.pk).values().first()
    return row


def with_records(world: Any) -> Any:
    """``world`` with a catalog version of its server and a change of an upstream of its tenant held on it."""
    upstream = Upstream.objects.create(
        tenant=world.tenant, name="records", url=f"https://{world.tenant.slug}.example/mcp", prefix="records_"
    )
    records = catalog_records(world.server, upstream)
    world.objects.update(dict(zip(RECORDS, records.values(), strict=True)))
    return world


@pytest.fixture
def matrix(two_tenants, key_client, member_factory):
    acme, globex = (with_records(world) for world in two_tenants)
    clients = {(w.tenant.slug, role): key_client(w.users[role]) for w in (acme, globex) for role in ROLES}
    spares = {acme.tenant.slug: _fresh_entries(acme), globex.tenant.slug: _fresh_entries(globex)}
    newcomer = member_factory(username="newcomer")
    return acme, globex, clients, spares, newcomer


def _ids(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {item["id"] for item in response.json()["results"]}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("role", ROLES)
def test_lists_show_only_the_own_tenant(matrix, endpoint, role):
    acme, globex, clients, _, _ = matrix
    for mine, theirs in ((acme, globex), (globex, acme)):
        listed = _ids(clients[(mine.tenant.slug, role)].get(f"/api/v1/{endpoint}/?page_size=500"))
        assert mine.objects[endpoint].pk in listed
        assert theirs.objects[endpoint].pk not in listed
        # Everything listed belongs to my tenant, as the database says.
        model = model_of(mine, endpoint)
        for pk in listed:
            assert _tenant_pk(model.objects.get(pk=pk)) == mine.tenant.pk
        # Filtering by the other tenant's id is an empty page, not an error.
        if endpoint not in ("tenants",):
            response = clients[(mine.tenant.slug, role)].get(f"/api/v1/{endpoint}/?tenant={theirs.tenant.pk}")
            assert response.status_code == 200 and response.json()["results"] == []


def _tenant_pk(obj: Any) -> int:
    if isinstance(obj, Tenant):
        return obj.pk
    for path in ("tenant_id", "server", "agent"):  # the first of these the object has
        value = getattr(obj, path, None)
        if path == "tenant_id" and value is not None:
            return value
        if value is not None and not isinstance(value, int):
            return value.tenant_id
    raise AssertionError(obj)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("role", ROLES)
def test_every_method_on_the_other_tenants_object_is_not_found_and_changes_nothing(matrix, endpoint, role):
    _acme, globex, clients, _, _ = matrix
    client = clients[("acme", role)]
    target = globex.objects[endpoint]
    before = snapshot(target)
    url = f"/api/v1/{endpoint}/{target.pk}/"
    body = PATCHES.get(endpoint, {"name": "x"})
    expected_write = 405 if endpoint in READ_ONLY else 404
    assert client.get(url).status_code == 404
    answers = {
        "put": client.put(url, body, format="json"),
        "patch": client.patch(url, body, format="json"),
        "delete": client.delete(url),
    }
    for method, response in answers.items():
        assert response.status_code == expected_write, (method, response.content)
        if response.status_code == 404:
            assert response.json() == {"error": {"code": "not_found", "message": "Not found."}}
    if endpoint in ACTIONS:
        response = client.post(f"{url}{ACTIONS[endpoint]}/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert snapshot(target) == before


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_other_tenants_object_answers_exactly_like_a_missing_one(matrix, endpoint):
    _acme, globex, clients, _, _ = matrix
    client = clients[("acme", "owner")]
    target = globex.objects[endpoint]
    missing = 10_000_000
    for method in ("get", "patch", "delete", "options"):
        foreign = getattr(client, method)(f"/api/v1/{endpoint}/{target.pk}/", {}, format="json")
        absent = getattr(client, method)(f"/api/v1/{endpoint}/{missing}/", {}, format="json")
        assert (foreign.status_code, foreign.content) == (absent.status_code, absent.content)


@pytest.mark.parametrize(
    ("endpoint", "role"),
    # Admins cannot add memberships at all: a 403 before any field is read (test_admins_write_the_catalog_…).
    [
        (endpoint, role)
        for endpoint in WRITABLE
        for role in ("owner", "admin")
        if (endpoint, role) != ("memberships", "admin")
    ],
)
def test_foreign_keys_to_the_other_tenant_are_a_400_that_reveals_nothing(matrix, endpoint, role):
    acme, globex, clients, spares, newcomer = matrix
    client = clients[("acme", role)]
    model = model_of(acme, endpoint)
    count = model.objects.count()
    valid = create_payload(endpoint, acme, spares["acme"], newcomer)
    for field, foreign in foreign_variants(endpoint, acme, globex, spares["globex"]):
        missing = 10_000_000
        absent_value = [missing] if isinstance(foreign, list) else missing
        foreign_answer = client.post(f"/api/v1/{endpoint}/", {**valid, field: foreign}, format="json")
        absent_answer = client.post(f"/api/v1/{endpoint}/", {**valid, field: absent_value}, format="json")
        assert foreign_answer.status_code == 400, (field, foreign_answer.content)
        error = foreign_answer.json()["error"]
        assert error["code"] == "validation_error" and field in error["fields"]
        foreign_id = foreign[0] if isinstance(foreign, list) else foreign
        assert foreign_answer.content.decode() == absent_answer.content.decode().replace(str(missing), str(foreign_id))
    assert model.objects.count() == count


@pytest.mark.parametrize("endpoint", WRITABLE)
def test_the_same_payload_inside_the_own_tenant_is_accepted(matrix, endpoint):
    """The control for the test above: the payloads are valid, so the 400s come from the foreign keys."""
    acme, _, clients, spares, newcomer = matrix
    response = clients[("acme", "owner")].post(
        f"/api/v1/{endpoint}/", create_payload(endpoint, acme, spares["acme"], newcomer), format="json"
    )
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("endpoint", WRITABLE)
def test_viewers_change_nothing(matrix, endpoint):
    acme, _, clients, spares, newcomer = matrix
    client = clients[("acme", "viewer")]
    target = acme.objects[endpoint]
    before = snapshot(target)
    model = model_of(acme, endpoint)
    count = model.objects.count()
    url = f"/api/v1/{endpoint}/{target.pk}/"
    assert client.get(url).status_code == 200
    current = client.get(url).json()
    answers = [
        client.post(f"/api/v1/{endpoint}/", create_payload(endpoint, acme, spares["acme"], newcomer), format="json"),
        client.put(url, {**current, **PATCHES[endpoint]}, format="json"),
        client.patch(url, PATCHES[endpoint], format="json"),
        client.delete(url),
    ]
    if endpoint in ACTIONS:
        answers.append(client.post(f"{url}{ACTIONS[endpoint]}/"))
    for response in answers:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"
    assert snapshot(target) == before
    assert model.objects.count() == count


@pytest.mark.parametrize("role", ROLES)
def test_viewers_cannot_terminate_sessions_and_nobody_writes_tenants(matrix, role):
    acme, _, clients, _, _ = matrix
    client = clients[("acme", role)]
    session_url = f"/api/v1/sessions/{acme.session.pk}/"
    response = client.post(f"{session_url}terminate/")
    assert response.status_code == (403 if role == "viewer" else 200)
    assert (McpSession.objects.get(pk=acme.session.pk).terminated_at is None) == (role == "viewer")
    assert client.patch(session_url, {"log_level": "debug"}, format="json").status_code == 405
    assert client.delete(session_url).status_code == 405
    tenant_url = f"/api/v1/tenants/{acme.tenant.pk}/"
    for response in (
        client.post("/api/v1/tenants/", {"slug": "new", "name": "New"}, format="json"),
        client.patch(tenant_url, {"name": "Renamed"}, format="json"),
        client.delete(tenant_url),
    ):
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"
    assert Tenant.objects.get(pk=acme.tenant.pk).name == "Acme"


def test_admins_write_the_catalog_but_do_not_manage_memberships(matrix):
    acme, _, clients, _spares, newcomer = matrix
    admin = clients[("acme", "admin")]
    viewer_membership = acme.memberships["viewer"]
    url = f"/api/v1/memberships/{viewer_membership.pk}/"
    assert admin.get(url).status_code == 200
    for response in (
        admin.post("/api/v1/memberships/", {"user": newcomer.username, "role": "viewer"}, format="json"),
        admin.patch(url, {"role": "owner"}, format="json"),
        admin.delete(url),
    ):
        assert response.status_code == 403, response.content
    assert TenantMembership.objects.get(pk=viewer_membership.pk).role == "viewer"
    assert not TenantMembership.objects.filter(user=newcomer).exists()
    # Making oneself owner is the same 403.
    own = acme.memberships["admin"]
    assert admin.patch(f"/api/v1/memberships/{own.pk}/", {"role": "owner"}, format="json").status_code == 403
    assert TenantMembership.objects.get(pk=own.pk).role == "admin"
    # …while the catalog is theirs to edit.
    assert admin.patch(f"/api/v1/tools/{acme.tool.pk}/", {"title": "t"}, format="json").status_code == 200


def test_owners_manage_memberships_of_their_own_tenant_only(matrix):
    acme, globex, clients, _, newcomer = matrix
    owner = clients[("acme", "owner")]
    created = owner.post("/api/v1/memberships/", {"user": newcomer.username, "role": "viewer"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["tenant"] == acme.tenant.pk  # defaulted: the owner owns exactly one tenant
    url = f"/api/v1/memberships/{created.json()['id']}/"
    assert owner.patch(url, {"role": "admin"}, format="json").json()["role"] == "admin"
    assert owner.delete(url).status_code == 204
    # Adding themselves, or anyone, to the tenant they do not own: a 400 on the tenant field.
    for user in (acme.users["owner"], newcomer):
        response = owner.post(
            "/api/v1/memberships/", {"tenant": globex.tenant.pk, "user": user.username, "role": "owner"}, format="json"
        )
        assert response.status_code == 400 and "tenant" in response.json()["error"]["fields"]
    assert not TenantMembership.objects.filter(tenant=globex.tenant, user__in=[acme.users["owner"], newcomer]).exists()


def test_the_last_owner_cannot_be_demoted_or_removed(matrix):
    acme, _, clients, _, _ = matrix
    owner = clients[("acme", "owner")]
    url = f"/api/v1/memberships/{acme.memberships['owner'].pk}/"
    response = owner.patch(url, {"role": "viewer"}, format="json")
    assert response.status_code == 400 and "role" in response.json()["error"]["fields"]
    assert owner.delete(url).status_code == 400
    assert TenantMembership.objects.get(pk=acme.memberships["owner"].pk).role == "owner"


def test_cross_tenant_bindings_are_refused_even_for_a_member_of_both(matrix, key_client, member_factory):
    """A user who administers both tenants still cannot bind one tenant's tool to the other's server."""
    acme, globex, _, spares, _ = matrix
    both = key_client(member_factory((acme.tenant, "admin"), (globex.tenant, "admin")))
    response = both.post(
        "/api/v1/server-tools/", {"server": acme.server.pk, "tool": spares["globex"]["tool"].pk}, format="json"
    )
    assert response.status_code == 400 and "tool" in response.json()["error"]["fields"]
    response = both.post("/api/v1/tokens/", {"agent": acme.agent.pk, "servers": [globex.server.pk]}, format="json")
    assert response.status_code == 400 and "servers" in response.json()["error"]["fields"]
    # And with two tenants to write in, the tenant is never guessed.
    response = both.post("/api/v1/tools/", {"name": "t", "static_result": {"content": []}}, format="json")
    assert response.status_code == 400 and "tenant" in response.json()["error"]["fields"]


def test_a_token_of_the_other_tenant_cannot_be_rescoped_through_update(matrix):
    acme, globex, clients, _, _ = matrix
    admin = clients[("acme", "admin")]
    response = admin.patch(f"/api/v1/tokens/{acme.token.pk}/", {"servers": [globex.server.pk]}, format="json")
    assert response.status_code == 400
    assert list(AgentToken.objects.get(pk=acme.token.pk).servers.all()) == [acme.server]


def test_superusers_see_both_tenants(matrix, key_client, user_factory):
    acme, globex, _, _, _ = matrix
    root = key_client(user_factory("root", is_staff=True, is_superuser=True))
    for endpoint in ENDPOINTS:
        listed = _ids(root.get(f"/api/v1/{endpoint}/?page_size=500"))
        assert {acme.objects[endpoint].pk, globex.objects[endpoint].pk} <= listed


def test_the_role_alone_opens_the_api(two_tenants, key_client, user_factory):
    """No group, no model permission, not staff: the membership's role is what the API goes by."""
    acme, _ = two_tenants
    viewer, admin = user_factory("bare-viewer"), user_factory("bare-admin")
    TenantMembership.objects.create(tenant=acme.tenant, user=viewer, role="viewer")
    TenantMembership.objects.create(tenant=acme.tenant, user=admin, role="admin")
    reader, editor = key_client(viewer), key_client(admin)
    listed = reader.get("/api/v1/tools/")
    assert listed.status_code == 200, listed.content
    assert [row["id"] for row in listed.json()["results"]] == [acme.tool.pk]
    refused = reader.patch(f"/api/v1/tools/{acme.tool.pk}/", {"title": "x"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "Your role in this tenant does not allow this."
    assert editor.patch(f"/api/v1/tools/{acme.tool.pk}/", {"title": "x"}, format="json").status_code == 200
    assert editor.post("/api/v1/memberships/", {}, format="json").status_code == 403  # owners manage members


def test_a_member_added_through_the_api_opens_the_admin(two_tenants, key_client, user_factory):
    from django.test import Client

    acme, _ = two_tenants
    owner = user_factory("api-owner")
    TenantMembership.objects.create(tenant=acme.tenant, user=owner, role="owner")
    newcomer = user_factory("api-newcomer")
    body = {"tenant": acme.tenant.pk, "user": "api-newcomer", "role": "viewer"}
    assert key_client(owner).post("/api/v1/memberships/", body, format="json").status_code == 201
    browser = Client()
    browser.force_login(type(newcomer).objects.get(pk=newcomer.pk))
    assert browser.get("/admin/").status_code == 200
    assert acme.tool.name in browser.get("/admin/mcp_app/tool/").content.decode()


def test_a_user_without_a_role_gets_nothing(two_tenants, key_client, user_factory):
    bare = key_client(user_factory("bare", is_staff=True))
    assert bare.get("/api/v1/tools/").status_code == 403


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_anonymous_requests_and_agent_tokens_are_401(two_tenants, endpoint):
    acme = with_records(two_tenants[0])
    anonymous = APIClient().get(f"/api/v1/{endpoint}/")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "not_authenticated"
    assert anonymous["WWW-Authenticate"] == 'Bearer realm="api"'
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {acme.raw_token}")
    response = agent.get(f"/api/v1/{endpoint}/{acme.objects[endpoint].pk}/")
    assert response.status_code == 401
    assert response.json()["error"] == {
        "code": "authentication_failed",
        "message": "Agent tokens cannot be used with the API; use a personal API key (mcpk_…).",
    }


def test_payload_builders_cover_every_writable_endpoint():
    assert set(PATCHES) == set(WRITABLE)
    assert json.dumps(sorted(ACTIONS)) == '["approvals", "sessions", "tokens"]'
