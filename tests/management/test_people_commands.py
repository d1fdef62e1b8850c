"""Operator commands for people: ``mcp_member add|remove|list`` and ``mcp_api_key issue|revoke|list``.

Each runs through ``call_command`` and is checked against what the product enforces: memberships through
``mcp_app.permissions`` (the roles the admin and the API use), keys by a real API request with the printed key.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from mcp_app import permissions
from mcp_app.models import ApiKey, Tenant, TenantMembership

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def acme() -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme")


@pytest.fixture
def people() -> dict[str, Any]:
    """Plain users, neither staff nor in any group: a tenant role is all they get, and all they need."""
    model = get_user_model()
    return {name: model.objects.create_user(username=name, password=PASSWORD) for name in ("alice", "bob")}


@pytest.fixture
def members(people: dict[str, Any]) -> dict[str, Any]:
    """``people``, each a viewer of a tenant of their own (so their keys have something to read)."""
    for name, user in people.items():
        TenantMembership.objects.create(tenant=Tenant.objects.create(slug=f"{name}-home", name=name), user=user)
    return people


def role_of(user: Any, tenant: Tenant) -> str | None:
    user = get_user_model().objects.get(pk=user.pk)  # fresh: no cached roles
    return permissions.access_for(user).roles.get(tenant.pk)


# mcp_member --------------------------------------------------------------------------------------------------


def test_member_add_change_list_and_remove(acme: Tenant, people: dict[str, Any]) -> None:
    out, _ = run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "owner")
    assert out.strip() == "Added alice as owner of acme."
    run("mcp_member", "add", "--tenant", "acme", "--user", "bob")
    assert role_of(people["alice"], acme) == "owner"
    assert role_of(people["bob"], acme) == "viewer"
    out, _ = run("mcp_member", "add", "--tenant", "acme", "--user", "bob", "--role", "admin")
    assert out.strip() == "Set bob as admin of acme."
    assert role_of(people["bob"], acme) == "admin"
    assert TenantMembership.objects.filter(tenant=acme).count() == 2
    listed = json.loads(run("mcp_member", "list", "--tenant", "acme", "--json")[0])
    assert {(row["user"], row["role"]) for row in listed} == {("alice", "owner"), ("bob", "admin")}
    assert run("mcp_member", "list", "--user", "bob")[0].split() == ["acme", "bob", "admin"]
    out, _ = run("mcp_member", "remove", "--tenant", "acme", "--user", "bob")
    assert out.strip() == "Removed bob from acme."
    assert role_of(people["bob"], acme) is None


def test_a_role_given_by_mcp_member_opens_the_admin_and_the_api(acme: Tenant, people: dict[str, Any]) -> None:
    """No staff flag, no group, no model permission: ``mcp_member add`` is the only step."""
    tool = acme.tools.create(name="echo_tool", kind="static", static_result={"content": []})
    raw = run("mcp_api_key", "issue", "--user", "alice")[0].strip()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    browser = Client()
    assert api.get("/api/v1/tools/").status_code == 403
    assert browser.post("/admin/login/", {"username": "alice", "password": PASSWORD}).status_code == 200  # refused

    run("mcp_member", "add", "--tenant", "acme", "--user", "alice")
    listed = api.get("/api/v1/tools/")
    assert listed.status_code == 200
    assert [row["name"] for row in listed.json()["results"]] == ["echo_tool"]
    assert api.patch(f"/api/v1/tools/{tool.pk}/", {"title": "x"}, format="json").status_code == 403  # a viewer
    signed_in = browser.post("/admin/login/", {"username": "alice", "password": PASSWORD})
    assert signed_in.status_code == 302
    changelist = browser.get("/admin/mcp_app/tool/")
    assert changelist.status_code == 200 and b"echo_tool" in changelist.content
    assert browser.get(f"/admin/mcp_app/tool/{tool.pk}/change/").status_code == 200  # read-only view
    assert browser.get("/admin/mcp_app/tool/add/").status_code == 403

    run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "admin")
    assert api.patch(f"/api/v1/tools/{tool.pk}/", {"title": "Echo"}, format="json").status_code == 200
    assert browser.get("/admin/mcp_app/tool/add/").status_code == 200
    assert browser.get("/admin/mcp_app/tenantmembership/add/").status_code == 403  # owners manage members


def test_member_json_output(acme: Tenant, people: dict[str, Any]) -> None:
    added = json.loads(run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "owner", "--json")[0])
    assert added["tenant"] == "acme" and added["user"] == "alice" and added["role"] == "owner"
    assert added["created"] is True
    changed = json.loads(run("mcp_member", "add", "--tenant", "acme", "--user", "bob", "--json")[0])
    assert (changed["role"], changed["created"]) == ("viewer", True)
    changed = json.loads(run("mcp_member", "add", "--tenant", "acme", "--user", "bob", "--role", "admin", "--json")[0])
    assert (changed["role"], changed["created"]) == ("admin", False)
    removed = json.loads(run("mcp_member", "remove", "--tenant", "acme", "--user", "bob", "--json")[0])
    assert removed == {"tenant": "acme", "user": "bob", "removed": True}
    assert role_of(people["bob"], acme) is None


def test_member_keeps_the_last_owner(acme: Tenant, people: dict[str, Any]) -> None:
    run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "owner")
    with pytest.raises(CommandError, match="last owner"):
        run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "viewer")
    with pytest.raises(CommandError, match="last owner"):
        run("mcp_member", "remove", "--tenant", "acme", "--user", "alice")
    assert role_of(people["alice"], acme) == "owner"
    run("mcp_member", "add", "--tenant", "acme", "--user", "bob", "--role", "owner")
    run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "viewer")
    assert role_of(people["alice"], acme) == "viewer"


def test_member_refuses_unknown_names_and_roles(acme: Tenant, people: dict[str, Any]) -> None:
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        run("mcp_member", "add", "--tenant", "nope", "--user", "alice")
    with pytest.raises(CommandError, match="no active user 'carol'"):
        run("mcp_member", "add", "--tenant", "acme", "--user", "carol")
    people["bob"].is_active = False
    people["bob"].save()
    with pytest.raises(CommandError, match="no active user 'bob'"):
        run("mcp_member", "add", "--tenant", "acme", "--user", "bob")
    with pytest.raises(CommandError, match="invalid choice"):
        run("mcp_member", "add", "--tenant", "acme", "--user", "alice", "--role", "god")
    with pytest.raises(CommandError, match="not a member"):
        run("mcp_member", "remove", "--tenant", "acme", "--user", "alice")
    with pytest.raises(CommandError, match="name a tenant or a user"):
        run("mcp_member", "list")
    assert not TenantMembership.objects.exists()


# mcp_api_key -------------------------------------------------------------------------------------------------


def api_status(raw: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client.get("/api/v1/tenants/").status_code


def test_api_key_issue_prints_a_working_key_once(members: dict[str, Any]) -> None:
    out, err = run("mcp_api_key", "issue", "--user", "alice", "--name", "ci")
    raw = out.strip()
    assert raw.startswith("mcpk_") and "\n" not in raw
    key = ApiKey.objects.get(user=members["alice"])
    assert f"mcpk_{key.prefix}_…" in err and raw not in err
    assert key.name == "ci" and raw not in (key.digest, key.prefix)
    assert api_status(raw) == 200
    listing, _ = run("mcp_api_key", "list", "--user", "alice")
    assert f"mcpk_{key.prefix}_…" in listing and "usable" in listing and raw not in listing


def test_api_key_issue_json_with_expiry(people: dict[str, Any]) -> None:
    result = json.loads(run("mcp_api_key", "issue", "--user", "alice", "--expires-in-days", "1", "--json")[0])
    assert ApiKey.objects.authenticate(result["key"]).prefix == result["prefix"]
    assert result["expires_at"] is not None
    with pytest.raises(CommandError, match="no active user 'carol'"):
        run("mcp_api_key", "issue", "--user", "carol")


def test_api_key_revoke_by_prefix_and_all(members: dict[str, Any]) -> None:
    first = run("mcp_api_key", "issue", "--user", "alice", "--name", "one")[0].strip()
    second = run("mcp_api_key", "issue", "--user", "alice", "--name", "two")[0].strip()
    bobs = run("mcp_api_key", "issue", "--user", "bob")[0].strip()
    with pytest.raises(CommandError, match="2 keys match"):
        run("mcp_api_key", "revoke", "--user", "alice")
    prefix = first.split("_")[1]
    assert run("mcp_api_key", "revoke", "--user", "alice", "--prefix", f"mcpk_{prefix}_")[0].strip() == (
        "Revoked 1 key(s)."
    )
    assert api_status(first) == 401
    assert api_status(second) == 200
    run("mcp_api_key", "revoke", "--user", "alice", "--all")
    assert api_status(second) == 401
    assert api_status(bobs) == 200  # another user's key is never matched
    with pytest.raises(CommandError, match="no unrevoked key matches"):
        run("mcp_api_key", "revoke", "--user", "alice", "--name", "one")


def test_api_key_list_and_revoke_json(members: dict[str, Any]) -> None:
    assert json.loads(run("mcp_api_key", "list", "--user", "alice", "--json")[0]) == []
    raw = run("mcp_api_key", "issue", "--user", "alice", "--name", "ci")[0].strip()
    prefix = raw.split("_")[1]
    [row] = json.loads(run("mcp_api_key", "list", "--user", "alice", "--json")[0])
    assert (row["prefix"], row["name"], row["state"], row["last_used_at"]) == (prefix, "ci", "usable", None)
    assert raw not in json.dumps(row)
    revoked = json.loads(run("mcp_api_key", "revoke", "--user", "alice", "--name", "ci", "--json")[0])
    assert revoked == {"revoked": 1, "prefixes": [prefix]}
    assert api_status(raw) == 401
    [row] = json.loads(run("mcp_api_key", "list", "--user", "alice", "--json")[0])
    assert row["state"] == "revoked"
