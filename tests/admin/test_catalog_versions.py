"""Catalog versions in the admin, as Globex's staff: a server's versions page (its versions and its draft with
their digests, the held changes publishing approves), the diff between two catalogs field by field, publishing the
draft and rolling back through confirmation pages (POST with CSRF, a message after), the held upstream changes
listed with their diff and a link to publish, ``review_edits`` and ``on_change`` in the forms. Viewers read and
change nothing (403); Acme's server is a 404 on every page and every POST, whatever the role.

Expected values come from what the test wrote (a tool's description, rows inserted here)."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from mcp_app.models import CatalogChange, CatalogVersion, McpServer, Tool, Upstream
from tests.conftest import hold_upstream_change

FIRST, SECOND = "Looks things up.", "Looks things up, fast."


def page_url(name: str, server: Any, *args: Any) -> str:
    return reverse(f"admin:mcp_app_mcpserver_{name}", args=[server.pk, *args])


def text(response: Any) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


def said(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def describe(tool: Tool, description: str) -> None:
    """Edit the tool as a form would (its save, so the catalog hears of it)."""
    tool.refresh_from_db()
    tool.description = description
    tool.save()


def versions_of(server: Any) -> list[CatalogVersion]:
    return list(CatalogVersion.objects.filter(server=server).order_by("number"))


@pytest.fixture
def server(globex: Any) -> McpServer:
    """Globex's server, reviewing its edits, its tool describing itself as ``FIRST``."""
    McpServer.objects.filter(pk=globex["mcpserver"].pk).update(review_edits=True)
    describe(globex["tool"], FIRST)
    return McpServer.objects.get(pk=globex["mcpserver"].pk)


@pytest.fixture
def editor(globex: Any, login: Any) -> Client:
    return login(globex.users["admin"])


def publish_draft(client: Client, server: Any, note: str = "") -> Any:
    response = client.post(page_url("publish", server), {"note": note})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert response["Location"] == page_url("versions", server)
    return response


def test_publish_the_draft_through_its_confirmation_page(server: McpServer, editor: Client, globex: Any) -> None:
    before = versions_of(server)
    confirm = editor.get(page_url("publish", server))
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert 'name="csrfmiddlewaretoken"' in page and f'action="{page_url("publish", server)}"' in page
    assert 'name="note"' in page
    response = publish_draft(editor, server, "first review")
    (new,) = [version for version in versions_of(server) if version not in before]
    assert said(response) == [f"Published version {new.number} of {server.server_id}."]
    assert (new.note, new.created_by, new.source) == ("first review", globex.users["admin"], "publish")
    assert McpServer.objects.get(pk=server.pk).published_version == new

    # The versions page: the version with its digest, served; the draft the same.
    listing = editor.get(page_url("versions", server))
    assert listing.status_code == 200
    shown = text(listing)
    assert f"Published: version {new.number} serves exactly this." in shown
    assert new.digest[:12] in shown and "first review" in shown and "served" in shown
    assert 'id="publish-draft"' not in listing.content.decode()  # nothing to publish

    # Publishing an unchanged draft says so and makes no version.
    again = publish_draft(editor, server)
    assert said(again) == [f"Nothing to publish: {server.server_id} already serves its draft."]
    assert versions_of(server) == [*before, new]


def test_the_diff_shows_each_changed_field_old_and_new(server: McpServer, editor: Client, globex: Any) -> None:
    publish_draft(editor, server)
    first = McpServer.objects.get(pk=server.pk).published_version
    describe(globex["tool"], SECOND)
    listing = editor.get(page_url("versions", server))
    assert f"Differs from version {first.number}, which is served now." in text(listing)
    assert 'id="publish-draft"' in listing.content.decode()

    diff = editor.get(page_url("diff", server))  # published → draft
    assert diff.status_code == 200
    body = diff.content.decode()
    assert f"v{first.number}" in text(diff) and "0 added, 0 removed, 1 changed" in text(diff)
    entry = re.search(r'<li class="mcp-diff-entry mcp-diff-changed"[^>]*data-key="([^"]+)"', body)
    assert entry is not None and entry.group(1) == globex["tool"].name
    row = re.search(r'<tr data-field="description">(.*?)</tr>', body, re.S)
    assert row is not None
    old, new = re.findall(r"<pre[^>]*>(.*?)</pre>", row.group(1), re.S)
    assert (html.unescape(old), html.unescape(new)) == (f'"{FIRST}"', f'"{SECOND}"')
    assert body.count("<tr data-field=") == 1  # only what changed

    # The other way round, between two versions.
    publish_draft(editor, server)
    second = McpServer.objects.get(pk=server.pk).published_version
    back = editor.get(page_url("diff", server), {"from": second.number, "to": first.number}).content.decode()
    row = re.search(r'<tr data-field="description">(.*?)</tr>', back, re.S)
    assert row is not None
    assert [html.unescape(v) for v in re.findall(r"<pre[^>]*>(.*?)</pre>", row.group(1), re.S)] == [
        f'"{SECOND}"',
        f'"{FIRST}"',
    ]
    same = editor.get(page_url("diff", server), {"from": second.number, "to": "draft"})
    assert "No differences" in text(same)
    for bad in ({"from": "latest"}, {"to": "99999"}):
        assert editor.get(page_url("diff", server), bad).status_code == 404


def test_roll_back_through_its_confirmation_page(server: McpServer, editor: Client, globex: Any) -> None:
    publish_draft(editor, server)
    first = McpServer.objects.get(pk=server.pk).published_version
    describe(globex["tool"], SECOND)
    publish_draft(editor, server)
    second = McpServer.objects.get(pk=server.pk).published_version
    listing = editor.get(page_url("versions", server)).content.decode()
    assert page_url("rollback", server, first.number) in listing
    assert page_url("rollback", server, second.number) not in listing  # the one served

    confirm = editor.get(page_url("rollback", server, first.number))
    assert confirm.status_code == 200
    assert "0 added, 0 removed, 1 changed" in text(confirm) and 'name="csrfmiddlewaretoken"' in confirm.content.decode()
    response = editor.post(page_url("rollback", server, first.number))
    assert response.status_code == 302
    served = McpServer.objects.get(pk=server.pk).published_version
    assert (served.source, served.rolled_back_to, served.digest) == ("rollback", first.number, first.digest)
    assert served.number > second.number
    assert said(response) == [
        f"Rolled back {server.server_id} to version {first.number}: it serves version {served.number}."
    ]
    assert editor.get(page_url("rollback", server, 99999)).status_code == 404


def test_posts_need_the_csrf_token(server: McpServer, globex: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(globex.users["admin"])
    before = versions_of(server)
    assert client.post(page_url("publish", server), {"note": "x"}).status_code == 403
    assert versions_of(server) == before


def test_viewers_read_the_pages_and_publish_nothing(server: McpServer, editor: Client, globex: Any, login: Any) -> None:
    publish_draft(editor, server)
    first = McpServer.objects.get(pk=server.pk).published_version
    describe(globex["tool"], SECOND)
    publish_draft(editor, server)
    viewer = login(globex.users["viewer"])
    listing = viewer.get(page_url("versions", server))
    assert listing.status_code == 200
    assert "/rollback/" not in listing.content.decode() and "/publish/" not in listing.content.decode()
    assert viewer.get(page_url("diff", server)).status_code == 200
    before = versions_of(server)
    for response in (
        viewer.get(page_url("publish", server)),
        viewer.post(page_url("publish", server)),
        viewer.get(page_url("rollback", server, first.number)),
        viewer.post(page_url("rollback", server, first.number)),
    ):
        assert response.status_code == 403
    assert versions_of(server) == before


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_another_tenants_server_is_404_on_every_page_and_post(
    acme: Any, globex: Any, login: Any, server: McpServer, role: str
) -> None:
    theirs = acme["mcpserver"]
    version = acme["catalogversion"]
    client = login(globex.users[role])
    before = versions_of(theirs)
    for name, args in (("versions", ()), ("diff", ()), ("publish", ()), ("rollback", (version.number,))):
        target = page_url(name, theirs, *args)
        assert client.get(target).status_code == 404, target
        assert client.post(target, {"note": "planted"}).status_code == 404, target
    assert versions_of(theirs) == before
    # The lists of records never name Acme's (its server, its upstream, their rows).
    for model in ("catalogversion", "catalogchange"):
        page = client.get(reverse(f"admin:mcp_app_{model}_changelist")).content.decode()
        assert theirs.server_id not in page and acme["upstream"].name not in page
        assert reverse(f"admin:mcp_app_{model}_change", args=[acme[model].pk]) not in page


def test_held_changes_are_listed_with_their_diff_and_a_link_to_publish(
    server: McpServer, editor: Client, globex: Any, login: Any
) -> None:
    upstream = globex["upstream"]
    held = CatalogChange.objects.create(
        tenant=globex.tenant,
        server=server,
        upstream=upstream,
        list_name="tools",
        key="globex_search",
        change=CatalogChange.Change.CHANGED,
        old={"name": "globex_search", "description": "Search.", "inputSchema": {"type": "object"}},
        new={
            "name": "globex_search",
            "description": "Search, and mail the results.",
            "inputSchema": {"type": "object"},
        },
    )
    listing = editor.get(reverse("admin:mcp_app_catalogchange_changelist"), {"status__exact": "pending"})
    assert listing.status_code == 200
    page = listing.content.decode()
    assert reverse("admin:mcp_app_catalogchange_change", args=[held.pk]) in page
    # The record of the world (an added entry) is pending too; nothing else of the tenant's is.
    assert reverse("admin:mcp_app_catalogchange_change", args=[globex["catalogchange"].pk]) in page

    detail = editor.get(reverse("admin:mcp_app_catalogchange_change", args=[held.pk]))
    assert detail.status_code == 200
    body = detail.content.decode()
    assert 'name="_save"' not in body
    row = re.search(r'<tr data-field="description">(.*?)</tr>', body, re.S)
    assert row is not None
    assert [html.unescape(v) for v in re.findall(r"<pre[^>]*>(.*?)</pre>", row.group(1), re.S)] == [
        '"Search."',
        '"Search, and mail the results."',
    ]
    assert page_url("publish", server) in body and f"Publish the draft of {server.server_id}" in text(detail)
    as_viewer = login(globex.users["viewer"]).get(reverse("admin:mcp_app_catalogchange_change", args=[held.pk]))
    assert as_viewer.status_code == 200 and "Search, and mail the results." in html.unescape(as_viewer.content.decode())
    assert page_url("publish", server) not in as_viewer.content.decode()  # not theirs to publish

    # The versions page lists it among what publishing approves; the confirmation page counts it.
    versions = editor.get(page_url("versions", server))
    held_card = re.search(r'<div id="catalog-held">(.*?)</div>', versions.content.decode(), re.S)
    assert held_card is not None and "globex_search" in held_card.group(1)
    assert "This approves 2 held upstream changes." in text(editor.get(page_url("publish", server)))


def test_approving_a_held_change_is_publishing_its_servers_draft(
    server: McpServer, editor: Client, globex: Any
) -> None:
    held = hold_upstream_change(server, globex["upstream"], "Search.", "Search, and mail the results.")
    detail = editor.get(reverse("admin:mcp_app_catalogchange_change", args=[held.pk]))
    link = re.search(r'<a[^>]+href="([^"]+)"[^>]*>Publish the draft of', detail.content.decode())
    assert link is not None and link.group(1) == page_url("publish", server)
    response = publish_draft(editor, server, "approve the mail change")
    held.refresh_from_db()
    assert held.status == CatalogChange.Status.PUBLISHED
    assert held.resolved_in == McpServer.objects.get(pk=server.pk).published_version
    assert said(response) == [f"Published version {held.resolved_in.number} of {server.server_id}."]
    page = editor.get(reverse("admin:mcp_app_catalogchange_change", args=[held.pk]))
    assert "Publish the draft of" not in text(page)  # nothing left to approve


def test_review_edits_and_on_change_are_in_the_forms(globex: Any, editor: Client) -> None:
    server = globex["mcpserver"]
    page = editor.get(reverse("admin:mcp_app_mcpserver_change", args=[server.pk]))
    body = page.content.decode()
    assert 'name="review_edits"' in body
    assert page_url("versions", server) in body  # the "Catalog versions" link and the published version's
    assert "none yet: it serves its draft" in text(page)
    data = {
        "server_id": server.server_id,
        "name": server.name,
        "version": "1.0.0",
        "enabled": "on",
        "protocol_versions": '["2025-11-25"]',
        "allowed_origins": "[]",
        "review_edits": "on",
        **{
            f"{kind}_bindings-{count}_FORMS": "0"
            for kind in ("tool", "resource", "prompt")
            for count in ("TOTAL", "INITIAL")
        },
    }
    saved = editor.post(reverse("admin:mcp_app_mcpserver_change", args=[server.pk]), data)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert McpServer.objects.get(pk=server.pk).review_edits is True
    upstream = globex["upstream"]
    form = editor.get(reverse("admin:mcp_app_upstream_change", args=[upstream.pk])).content.decode()
    options = re.findall(r'<option value="(\w+)"', form.split('name="on_change"', 1)[1].split("</select>", 1)[0])
    assert options == ["publish", "hold", "block"]
    data = {
        "name": upstream.name,
        "url": upstream.url,
        "prefix": upstream.prefix,
        "enabled": "on",
        "headers": "{}",
        "secret_headers": "",
        "oauth_client_id": "",
        "oauth_client_secret": "",
        "oauth_issuer": "",
        "oauth_scope": "",
        "timeout_seconds": "",
        "sync_interval_seconds": "",
        "on_change": "block",
        "bindings-TOTAL_FORMS": "0",
        "bindings-INITIAL_FORMS": "0",
    }
    response = editor.post(reverse("admin:mcp_app_upstream_change", args=[upstream.pk]), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Upstream.objects.get(pk=upstream.pk).on_change == "block"
    # Left out of a post, the policy stays as it is.
    data.pop("on_change")
    assert editor.post(reverse("admin:mcp_app_upstream_change", args=[upstream.pk]), data).status_code == 302
    assert Upstream.objects.get(pk=upstream.pk).on_change == "block"
