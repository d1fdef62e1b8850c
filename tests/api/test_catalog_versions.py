"""Catalog versions through the API, as a tenant's admin and viewer with personal API keys: ``review_edits`` and
``on_change`` written like the other fields; the draft, a diff field by field, publish (201, or 200 when nothing
changed), republish and rollback; the versions listed newest first and one read with its entries; held upstream
changes listed, filtered and read with their diff, and approved by publishing the draft. Viewers read and
publish nothing (403); another tenant's servers, versions and changes are 404 on every URL and never listed.

Expected values come from what the test wrote (a tool's description, rows inserted here), never from the API."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.models import CatalogChange, CatalogVersion, McpServer, Tool, Upstream
from tests.conftest import hold_upstream_change

VERSIONS = "/api/v1/catalog-versions/"
CHANGES = "/api/v1/catalog-changes/"
FIRST, SECOND = "Looks things up.", "Looks things up, fast."


def server_url(server: Any, what: str = "") -> str:
    return f"/api/v1/servers/{server.pk}/{what + '/' if what else ''}"


def error_code(response: Any) -> str:
    return str(response.json()["error"]["code"])


@pytest.fixture
def acme(two_tenants: Any) -> Any:
    return two_tenants[0]


@pytest.fixture
def globex(two_tenants: Any) -> Any:
    return two_tenants[1]


@pytest.fixture
def admin(acme: Any, key_client: Any) -> Any:
    return key_client(acme.users["admin"])


@pytest.fixture
def reviewed(acme: Any, admin: Any) -> dict[str, Any]:
    """Acme's server reviews its edits, its tool says ``FIRST``, and that is published: version ``first``."""
    response = admin.patch(server_url(acme.server), {"review_edits": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["review_edits"] is True
    assert admin.patch(f"/api/v1/tools/{acme.tool.pk}/", {"description": FIRST}, format="json").status_code == 200
    published = admin.post(server_url(acme.server, "publish"), {"note": "first review"}, format="json")
    assert published.status_code == 201, published.content
    return published.json()


@pytest.fixture
def held(acme: Any, globex: Any) -> dict[str, CatalogChange]:
    """Held changes of an upstream of each tenant, inserted as the sync writes them."""
    rows = {}
    for world in (acme, globex):
        upstream = Upstream.objects.create(
            tenant=world.tenant, name="docs", url=f"https://{world.tenant.slug}.example/mcp", prefix="docs_"
        )
        rows[world.tenant.slug] = CatalogChange.objects.create(
            tenant=world.tenant,
            server=world.server,
            upstream=upstream,
            list_name="tools",
            key="docs_search",
            change=CatalogChange.Change.CHANGED,
            old={"name": "docs_search", "description": "Search the docs.", "inputSchema": {"type": "object"}},
            new={
                "name": "docs_search",
                "description": "Search the docs and send them away.",
                "inputSchema": {"type": "object"},
            },
        )
    rows["acme-old"] = CatalogChange.objects.create(
        tenant=acme.tenant,
        server=acme.server,
        upstream=rows["acme"].upstream,
        list_name="prompts",
        key="docs_summary",
        change=CatalogChange.Change.REMOVED,
        old={"name": "docs_summary"},
        status=CatalogChange.Status.SUPERSEDED,
    )
    return rows


def tool_definition(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (entry,) = (entry for entry in entries if entry["list"] == "tools" and entry["definition"]["name"] == name)
    return dict(entry["definition"])


def test_publish_diff_list_and_roll_back(acme: Any, admin: Any, reviewed: dict[str, Any]) -> None:
    first = reviewed
    assert (first["server"], first["source"], first["note"]) == (acme.server.pk, "publish", "first review")
    assert (first["published"], first["created_by"], first["entry_count"]) == (True, "acme-admin", 3)
    assert len(first["digest"]) == 64

    # Nothing changed since: publishing again is a 200 with the version served, not a new one.
    again = admin.post(server_url(acme.server, "publish"), {}, format="json")
    assert again.status_code == 200 and again.json()["id"] == first["id"]

    # An edit waits in the draft: the server still serves the first version.
    assert admin.patch(f"/api/v1/tools/{acme.tool.pk}/", {"description": SECOND}, format="json").status_code == 200
    assert admin.get(server_url(acme.server)).json()["published_version"] == first["number"]
    draft = admin.get(server_url(acme.server, "draft")).json()
    assert (draft["server"], draft["published_version"], draft["differs"]) == (acme.server.pk, first["number"], True)
    assert draft["digest"] != first["digest"] and len(draft["entries"]) == 3
    assert tool_definition(draft["entries"], acme.tool.name)["description"] == SECOND

    diff = admin.get(server_url(acme.server, "diff"))  # published → draft
    assert diff.status_code == 200, diff.content
    body = diff.json()
    assert body["from"] == {"version": first["number"], "digest": first["digest"]}
    assert body["to"] == {"version": "draft", "digest": draft["digest"]}
    assert (body["identical"], body["counts"]) == (False, {"added": 0, "removed": 0, "changed": 1})
    (change,) = body["changes"]
    assert (change["list"], change["key"], change["change"]) == ("tools", acme.tool.name, "changed")
    assert change["fields"] == [{"field": "description", "old": FIRST, "new": SECOND}]
    assert change["old"]["description"] == FIRST and change["new"]["description"] == SECOND

    second = admin.post(server_url(acme.server, "publish"), {"note": "faster"}, format="json")
    assert second.status_code == 201, second.content
    second_body = second.json()
    assert second_body["number"] > first["number"] and second_body["digest"] == draft["digest"]
    assert admin.get(server_url(acme.server, "draft")).json()["differs"] is False

    # The list, newest first, without entries; one version with them.
    listed = admin.get(VERSIONS, {"server": acme.server.pk})
    assert listed.status_code == 200
    rows = listed.json()["results"]
    assert [row["number"] for row in rows][:2] == [second_body["number"], first["number"]]
    assert [row["published"] for row in rows][:2] == [True, False]
    assert all("entries" not in row for row in rows)
    detail = admin.get(f"{VERSIONS}{first['id']}/").json()
    assert tool_definition(detail["entries"], acme.tool.name)["description"] == FIRST
    assert detail["published"] is False

    between = admin.get(server_url(acme.server, "diff"), {"from": second_body["number"], "to": first["number"]}).json()
    assert between["changes"][0]["fields"] == [{"field": "description", "old": SECOND, "new": FIRST}]

    # Roll back: the first version's definitions again, as a new version.
    rolled = admin.post(server_url(acme.server, "rollback"), {"version": first["number"]}, format="json")
    assert rolled.status_code == 201, rolled.content
    body = rolled.json()
    assert (body["source"], body["rolled_back_to"], body["digest"]) == ("rollback", first["number"], first["digest"])
    assert body["number"] > second_body["number"] and body["published"] is True
    assert admin.get(server_url(acme.server)).json()["published_version"] == body["number"]
    assert McpServer.objects.get(pk=acme.server.pk).published_version_id == body["id"]
    same = admin.get(server_url(acme.server, "diff"), {"from": first["number"], "to": body["number"]}).json()
    assert same["identical"] is True and same["changes"] == []

    # Republish the second version by number.
    republished = admin.post(server_url(acme.server, "publish"), {"version": second_body["number"]}, format="json")
    assert republished.status_code == 201, republished.content
    assert republished.json()["digest"] == second_body["digest"]


def test_bad_versions_are_400s_that_name_the_field(acme: Any, admin: Any, reviewed: dict[str, Any]) -> None:
    count = CatalogVersion.objects.filter(server=acme.server).count()
    for query, field in (({"from": "latest"}, "from"), ({"to": "-1"}, "to"), ({"from": "99999"}, "version")):
        response = admin.get(server_url(acme.server, "diff"), query)
        assert response.status_code == 400, (query, response.content)
        assert error_code(response) == "validation_error" and field in response.json()["error"]["fields"]
    for what, body in (("rollback", {}), ("rollback", {"version": 99999}), ("publish", {"version": 99999})):
        response = admin.post(server_url(acme.server, what), body, format="json")
        assert response.status_code == 400, (what, body, response.content)
        assert "version" in response.json()["error"]["fields"]
    assert CatalogVersion.objects.filter(server=acme.server).count() == count


def test_viewers_read_versions_and_publish_nothing(acme: Any, key_client: Any, reviewed: dict[str, Any]) -> None:
    viewer = key_client(acme.users["viewer"])
    Tool.objects.filter(pk=acme.tool.pk).update(description=SECOND)
    for url in (server_url(acme.server, "draft"), server_url(acme.server, "diff"), f"{VERSIONS}{reviewed['id']}/"):
        assert viewer.get(url).status_code == 200, url
    count = CatalogVersion.objects.filter(server=acme.server).count()
    for what, body in (("publish", {}), ("rollback", {"version": reviewed["number"]})):
        response = viewer.post(server_url(acme.server, what), body, format="json")
        assert response.status_code == 403, response.content
        assert error_code(response) == "permission_denied"
    assert viewer.patch(server_url(acme.server), {"review_edits": False}, format="json").status_code == 403
    assert CatalogVersion.objects.filter(server=acme.server).count() == count
    assert McpServer.objects.get(pk=acme.server.pk).review_edits is True


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_another_tenants_versions_and_changes_are_not_found(
    acme: Any, globex: Any, key_client: Any, reviewed: dict[str, Any], held: dict[str, CatalogChange], role: str
) -> None:
    """Globex's staff, whatever their role, against Acme's server, version and change: 404 exactly like ids that
    do not exist, nothing listed, nothing published."""
    client = key_client(globex.users[role])
    count = CatalogVersion.objects.filter(server=acme.server).count()
    missing = 10_000_000
    theirs, absent = acme.server.pk, missing
    for what in ("draft", "diff"):
        foreign = client.get(f"/api/v1/servers/{theirs}/{what}/")
        assert foreign.status_code == 404
        assert foreign.content == client.get(f"/api/v1/servers/{absent}/{what}/").content
    for what, body in (("publish", {}), ("rollback", {"version": reviewed["number"]})):
        foreign = client.post(f"/api/v1/servers/{theirs}/{what}/", body, format="json")
        assert foreign.status_code == 404, foreign.content
        assert foreign.json() == {"error": {"code": "not_found", "message": "Not found."}}
    for url in (f"{VERSIONS}{reviewed['id']}/", f"{CHANGES}{held['acme'].pk}/"):
        assert client.get(url).status_code == 404
    assert client.get(VERSIONS, {"server": theirs}).json()["results"] == []
    listed = client.get(CHANGES).json()["results"]
    assert [row["id"] for row in listed] == [held["globex"].pk]
    assert client.get(CHANGES, {"upstream": held["acme"].upstream_id}).json()["results"] == []
    assert CatalogVersion.objects.filter(server=acme.server).count() == count
    assert CatalogChange.objects.get(pk=held["acme"].pk).status == CatalogChange.Status.PENDING


def test_held_changes_listed_filtered_and_read_with_their_diff(
    acme: Any, admin: Any, held: dict[str, CatalogChange]
) -> None:
    rows = admin.get(CHANGES).json()["results"]
    assert {row["id"] for row in rows} == {held["acme"].pk, held["acme-old"].pk}
    pending = admin.get(CHANGES, {"status": "pending", "server": acme.server.pk}).json()["results"]
    assert [row["id"] for row in pending] == [held["acme"].pk]
    by_upstream = admin.get(CHANGES, {"upstream": held["acme"].upstream_id, "change": "removed"}).json()["results"]
    assert [row["id"] for row in by_upstream] == [held["acme-old"].pk]
    assert admin.get(CHANGES, {"status": "approved"}).status_code == 400  # not a status

    detail = admin.get(f"{CHANGES}{held['acme'].pk}/").json()
    assert (detail["server"], detail["upstream"], detail["key"]) == (
        acme.server.pk,
        held["acme"].upstream_id,
        "docs_search",
    )
    assert (detail["change"], detail["status"], detail["resolved_in"]) == ("changed", "pending", None)
    (entry,) = detail["diff"]
    assert (entry["list"], entry["key"], entry["change"]) == ("tools", "docs_search", "changed")
    assert entry["fields"] == [
        {"field": "description", "old": "Search the docs.", "new": "Search the docs and send them away."}
    ]
    removed = admin.get(f"{CHANGES}{held['acme-old'].pk}/").json()
    assert [(e["change"], e["old"], e["new"]) for e in removed["diff"]] == [("removed", {"name": "docs_summary"}, None)]
    # Records: nobody writes them through the API.
    assert admin.patch(f"{CHANGES}{held['acme'].pk}/", {"status": "published"}, format="json").status_code == 405
    assert admin.delete(f"{VERSIONS}{held['acme'].pk}/").status_code == 405


def test_publishing_the_draft_approves_the_held_change_it_carries(acme: Any, admin: Any, key_client: Any) -> None:
    upstream = Upstream.objects.create(tenant=acme.tenant, name="docs", url="https://docs.example/mcp", prefix="docs_")
    held = hold_upstream_change(acme.server, upstream, "Search the docs.", "Search the docs and send them away.")
    url = f"{CHANGES}{held.pk}/"
    draft = admin.get(server_url(acme.server, "draft")).json()
    assert (draft["differs"], draft["pending_changes"]) == (True, 1)
    assert (
        key_client(acme.users["viewer"]).post(server_url(acme.server, "publish"), {}, format="json").status_code == 403
    )
    assert admin.get(url).json()["status"] == "pending"

    published = admin.post(server_url(acme.server, "publish"), {"note": "approve the docs change"}, format="json")
    assert published.status_code == 201, published.content
    change = admin.get(url).json()
    assert (change["status"], change["resolved_in"]) == ("published", published.json()["number"])
    assert change["resolved_at"] is not None
    assert admin.get(CHANGES, {"status": "pending", "server": acme.server.pk}).json()["results"] == []
    assert admin.get(server_url(acme.server, "draft")).json()["pending_changes"] == 0


def test_on_change_is_written_like_the_other_upstream_fields(acme: Any, admin: Any, key_client: Any) -> None:
    upstream = Upstream.objects.create(tenant=acme.tenant, name="docs", url="https://docs.example/mcp", prefix="d_")
    url = f"/api/v1/upstreams/{upstream.pk}/"
    assert admin.get(url).json()["on_change"] == "hold"  # the model's default
    changed = admin.patch(url, {"on_change": "block"}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["on_change"] == "block"
    assert Upstream.objects.get(pk=upstream.pk).on_change == "block"
    refused = admin.patch(url, {"on_change": "ignore"}, format="json")
    assert refused.status_code == 400 and "on_change" in refused.json()["error"]["fields"]
    viewer = key_client(acme.users["viewer"])
    assert viewer.patch(url, {"on_change": "publish"}, format="json").status_code == 403
    assert Upstream.objects.get(pk=upstream.pk).on_change == "block"


def test_anonymous_callers_are_401_on_the_server_verbs(acme: Any) -> None:
    from rest_framework.test import APIClient

    for method, what in (("get", "draft"), ("get", "diff"), ("post", "publish"), ("post", "rollback")):
        response = getattr(APIClient(), method)(server_url(acme.server, what))
        assert response.status_code == 401
        assert error_code(response) == "not_authenticated"
