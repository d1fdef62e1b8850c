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
from rest_framework.test import APIClient

from mcp_app import permissions
from mcp_app.models import ApiKey, Tenant, TenantMembership

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def acme() -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme")


@pytest.fixture
def people() -> dict[str, Any]:
    """Staff users with the ``MCP tenant staff`` model permissions: their tenant roles decide what they see."""
    model = get_user_model()
    people = {name: model.objects.create_user(username=name, is_staff=True) for name in ("alice", "bob")}
    for user in people.values():
        user.groups.add(permissions.ensure_staff_group())
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


def test_api_key_issue_prints_a_working_key_once(people: dict[str, Any]) -> None:
    out, err = run("mcp_api_key", "issue", "--user", "alice", "--name", "ci")
    raw = out.strip()
    assert raw.startswith("mcpk_") and "\n" not in raw
    key = ApiKey.objects.get(user=people["alice"])
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


def test_api_key_revoke_by_prefix_and_all(people: dict[str, Any]) -> None:
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
