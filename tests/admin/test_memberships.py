"""Owners manage memberships by username, and a tenant that has an owner keeps one (demotion, deletion, the
tenant page's inline and the bulk action alike)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

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


class _FormFields(HTMLParser):
    """The name/value pairs a browser would submit from a page's forms (no JavaScript): inputs (checked boxes
    only), selected options and textareas; the inlines' ``__prefix__`` templates left out."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {key: value or "" for key, value in attrs}
        name = attr.get("name", "")
        if tag == "input" and name and "__prefix__" not in name:
            kind = attr.get("type", "text")
            if kind in ("submit", "button", "image", "file", "reset"):
                return
            if kind in ("checkbox", "radio") and "checked" not in attr:
                return
            self.fields[name] = attr.get("value", "on" if kind == "checkbox" else "")
        elif tag == "select" and "__prefix__" not in name:
            self._select = name or None
        elif tag == "option" and self._select and "selected" in attr:
            self.fields[self._select] = attr.get("value", "")
        elif tag == "textarea" and name and "__prefix__" not in name:
            self._textarea = name
            self.fields[name] = ""

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None


def submitted(page: str) -> dict[str, str]:
    parser = _FormFields()
    parser.feed(page)
    fields = parser.fields
    fields.pop("csrfmiddlewaretoken", None)
    return {name: value.removeprefix("\n") if name.endswith("-body") else value for name, value in fields.items()}


def test_the_tenant_page_saves_again_as_shown_after_a_member_is_added(globex, login, member_factory):
    """The bug: the inline rendered a membership's user as its primary key, so the page's next save failed
    with "No active user with this username." The page is submitted as rendered, twice after the addition."""
    member_factory(username="newcomer")
    client = login(globex.users["owner"])
    change = url("tenant", "change", globex.tenant.pk)
    data = submitted(client.get(change).content.decode())
    rows = int(data["memberships-TOTAL_FORMS"])
    assert rows == 3
    data |= {
        "memberships-TOTAL_FORMS": str(rows + 1),
        f"memberships-{rows}-tenant": str(globex.tenant.pk),
        f"memberships-{rows}-user": "newcomer",
        f"memberships-{rows}-role": "viewer",
    }
    response = client.post(change, data)
    assert response.status_code == 302, re.findall(
        r'class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S
    )
    assert TenantMembership.objects.filter(tenant=globex.tenant, user__username="newcomer", role="viewer").exists()
    for _ in range(2):
        data = submitted(client.get(change).content.decode())
        shown = {value for name, value in data.items() if re.fullmatch(r"memberships-\d+-user", name)}
        assert shown == {"globex-owner", "globex-admin", "globex-viewer", "newcomer"}
        response = client.post(change, data)
        assert response.status_code == 302, re.findall(
            r'class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S
        )
    assert TenantMembership.objects.filter(tenant=globex.tenant).count() == 4


def test_a_member_added_on_the_tenant_page_opens_the_admin_by_the_role_alone(globex, login, django_user_model):
    """A plain user (not staff, no group) added as viewer reads the tenant's pages at once, and changes nothing."""
    newcomer = django_user_model.objects.create_user("plain-newcomer")
    client = login(globex.users["owner"])
    change = url("tenant", "change", globex.tenant.pk)
    data = submitted(client.get(change).content.decode())
    rows = int(data["memberships-TOTAL_FORMS"])
    data |= {
        "memberships-TOTAL_FORMS": str(rows + 1),
        f"memberships-{rows}-tenant": str(globex.tenant.pk),
        f"memberships-{rows}-user": "plain-newcomer",
        f"memberships-{rows}-role": "viewer",
    }
    assert client.post(change, data).status_code == 302
    reader = login(django_user_model.objects.get(pk=newcomer.pk))
    assert reader.get("/admin/").status_code == 200
    tool = globex.objects["mcp_app.tool"]
    listed = reader.get(url("tool", "changelist"))
    assert listed.status_code == 200 and tool.name in listed.content.decode()
    assert reader.get(url("tool", "change", tool.pk)).status_code == 200
    assert reader.post(url("tool", "change", tool.pk), {"name": "renamed"}).status_code == 403
    assert reader.get(url("tool", "add")).status_code == 403
