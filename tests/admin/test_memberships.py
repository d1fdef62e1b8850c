"""Owners manage memberships by username, and a tenant that has an owner keeps one (demotion, deletion, the
tenant page's inline and the bulk action alike)."""

from __future__ import annotations

from django.urls import reverse

from mcp_app.models import TenantMembership


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:mcp_app_{model}_{view}", args=args)


def owner_membership(world):
    return world.users["owner"].mcp_memberships.get()


def test_the_last_owner_cannot_step_down_until_there_is_another(globex, login):
    client = login(globex.users["owner"])
    mine = owner_membership(globex)
    response = client.post(url("tenantmembership", "change", mine.pk), {"role": "admin"})
    assert response.status_code == 200
    assert "keeps at least one owner" in response.content.decode()
    assert TenantMembership.objects.get(pk=mine.pk).role == "owner"
    admin = globex.users["admin"].mcp_memberships.get()
    assert client.post(url("tenantmembership", "change", admin.pk), {"role": "owner"}).status_code == 302
    assert client.post(url("tenantmembership", "change", mine.pk), {"role": "admin"}).status_code == 302
    assert TenantMembership.objects.get(pk=mine.pk).role == "admin"


def test_the_last_owner_is_not_removed(globex, login):
    client = login(globex.users["owner"])
    mine = owner_membership(globex)
    assert client.post(url("tenantmembership", "delete", mine.pk), {"post": "yes"}).status_code == 403
    client.post(
        url("tenantmembership", "changelist"),
        {"action": "delete_selected", "_selected_action": [mine.pk], "post": "yes"},
    )
    assert TenantMembership.objects.filter(pk=mine.pk).exists()
    viewer = globex.users["viewer"].mcp_memberships.get()
    client.post(
        url("tenantmembership", "changelist"),
        {"action": "delete_selected", "_selected_action": [viewer.pk], "post": "yes"},
    )
    assert not TenantMembership.objects.filter(pk=viewer.pk).exists()


def test_the_tenant_page_keeps_an_owner_and_adds_members_by_username(globex, login):
    client = login(globex.users["owner"])
    memberships = list(TenantMembership.objects.filter(tenant=globex.tenant).order_by("pk"))
    data = {
        "name": globex.tenant.name,
        "memberships-TOTAL_FORMS": str(len(memberships) + 1),
        "memberships-INITIAL_FORMS": str(len(memberships)),
    }
    for index, membership in enumerate(memberships):
        data |= {
            f"memberships-{index}-id": membership.pk,
            f"memberships-{index}-tenant": globex.tenant.pk,
            f"memberships-{index}-user": membership.user.username,
            f"memberships-{index}-role": "viewer" if membership.role == "owner" else membership.role,
        }
    new = len(memberships)
    data |= {
        f"memberships-{new}-tenant": globex.tenant.pk,
        f"memberships-{new}-user": "nobody",
        f"memberships-{new}-role": "viewer",
    }
    response = client.post(url("tenant", "change", globex.tenant.pk), data)
    assert response.status_code == 200
    page = response.content.decode()
    assert "keeps at least one owner" in page
    assert "No active user with this username." in page
    assert TenantMembership.objects.filter(tenant=globex.tenant, role="owner").count() == 1
