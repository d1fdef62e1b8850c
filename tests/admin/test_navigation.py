"""The admin's frame: the sidebar offers every page a user may open, and errors come in the admin's theme."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse

pytestmark = pytest.mark.django_db


def sidebar_links(page: str) -> set[str]:
    import re

    nav = page[page.index("<nav") :] if "<nav" in page else page
    return set(re.findall(r'href="(/admin/[^"]*)"', nav))


@pytest.mark.parametrize("model", ["oauthconsent", "oauthagent"])
def test_the_sidebar_offers_oauth_consents_and_agents(globex: Any, login: Any, model: str) -> None:
    page = login(globex.users["admin"]).get(reverse("admin:index"))
    assert page.status_code == 200
    assert reverse(f"admin:mcp_app_{model}_changelist") in sidebar_links(page.content.decode())


def test_every_page_of_the_index_is_in_the_sidebar(admin_client: Any, rf: Any) -> None:
    request = admin_client.get(reverse("admin:index")).wsgi_request
    pages = {model["admin_url"] for app in admin.site.get_app_list(request) for model in app["models"]}
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert pages and pages <= sidebar_links(page)


def test_a_403_in_the_admin_is_the_admins_page(globex: Any, login: Any) -> None:
    response = login(globex.users["viewer"]).get(reverse("admin:mcp_app_tool_add"))
    assert response.status_code == 403
    page = response.content.decode()
    assert "403 · Not allowed" in page
    assert reverse("admin:mcp_app_tool_changelist") in sidebar_links(page)  # the admin's frame, with its sidebar


def test_a_404_in_the_admin_is_the_admins_page_and_says_the_same_for_a_foreign_object(
    acme: Any, globex: Any, login: Any
) -> None:
    client = login(globex.users["admin"])
    foreign = client.get(reverse("admin:mcp_app_tool_change", args=[acme.objects["mcp_app.tool"].pk]))
    missing = client.get(reverse("admin:mcp_app_tool_change", args=[10_000_000]))
    assert foreign.status_code == missing.status_code == 404
    for response in (foreign, missing):
        assert "404 · Not found" in response.content.decode()
        assert "There is nothing here, or nothing you may see." in response.content.decode()


def test_errors_outside_the_admin_are_djangos(client: Any) -> None:
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert "404 · Not found" not in response.content.decode()


@pytest.mark.parametrize("page", ["change", "try_it"])
def test_an_objects_name_is_written_as_it_is_in_the_title(globex: Any, login: Any, page: str) -> None:
    from mcp_app.models import Tool

    tool = Tool.objects.create(tenant=globex.tenant, name="up_add", kind="static", static_result={"content": []})
    content = login(globex.users["admin"]).get(reverse(f"admin:mcp_app_tool_{page}", args=[tool.pk])).content
    text = content.decode()
    assert "Up_add" not in text
    assert "up_add (globex)" in text
