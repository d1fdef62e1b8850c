"""Catalog versions, the core: digests, publish, auto-publish on edit or review, rollback, diff, held changes."""

from __future__ import annotations

import pytest
from django.db import transaction

from mcp_app.catalog import versions
from mcp_app.catalog.resolver import resolve_catalog
from mcp_app.models import (
    CatalogChange,
    CatalogVersion,
    McpServer,
    Resource,
    ServerResource,
    ServerTool,
    Tool,
    Upstream,
)

ANSWER = {"content": [{"type": "text", "text": "ok"}]}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _server(server):
    return McpServer.objects.get(pk=server.pk)


def _lookup(tool_factory, server, **fields):
    fields.setdefault("description", "Look a city up.")
    fields.setdefault("input_schema", CITY)
    return tool_factory(server, "lookup", kind=Tool.Kind.STATIC, static_result=ANSWER, **fields)


def _tool(name="lookup", description="Look a city up.", **more):
    return {"name": name, "description": description, "inputSchema": CITY, **more}


def _entry(definition, ref=1, list_name="tools", upstream=None):
    return {"list": list_name, "ref": ref, "upstream": upstream, "definition": definition}


def test_the_digest_covers_lists_and_definitions_only():
    one = [_entry(_tool(), ref=1, upstream=None)]
    same = [_entry({"inputSchema": CITY, "description": "Look a city up.", "name": "lookup"}, ref=9, upstream=4)]
    assert versions.entries_digest(one) == versions.entries_digest(same)
    assert versions.entries_digest(one) != versions.entries_digest([_entry(_tool(description="Other."))])
    assert versions.entries_digest(one) != versions.entries_digest([_entry(_tool(), list_name="prompts")])
    # sha256 hex of the RFC 8785 form of [["tools", {...}]], independent of this module.
    assert len(versions.entries_digest(one)) == 64


def test_the_digest_is_the_sha256_of_the_canonical_json():
    import hashlib

    entries = [_entry({"name": "b", "inputSchema": {"type": "object"}})]
    expected = hashlib.sha256(b'[["tools",{"inputSchema":{"type":"object"},"name":"b"}]]').hexdigest()
    assert versions.entries_digest(entries) == expected


def test_the_draft_lists_each_entry_with_its_row_and_wire_definition(server_factory, tool_factory):
    server = server_factory()
    tool = _lookup(tool_factory, server, title="Lookup")
    resource = Resource.objects.create(
        tenant=server.tenant, uri="file:///a.txt", name="a", text="A", mime_type="text/plain"
    )
    ServerResource.objects.create(server=server, resource=resource)
    assert versions.draft_entries(_server(server)) == [
        {
            "list": "tools",
            "ref": tool.pk,
            "upstream": None,
            "definition": {"name": "lookup", "title": "Lookup", "description": "Look a city up.", "inputSchema": CITY},
        },
        {
            "list": "resources",
            "ref": resource.pk,
            "upstream": None,
            "definition": {"uri": "file:///a.txt", "name": "a", "mimeType": "text/plain"},
        },
    ]


def test_publish_numbers_versions_and_writes_nothing_for_the_same_content(server_factory, tool_factory):
    server = server_factory()
    tool = _lookup(tool_factory, server)
    first = versions.publish(_server(server), note="first")
    assert (first.number, first.source, first.note) == (1, "publish", "first")
    assert _server(server).published_version_id == first.pk
    before = _server(server).catalog_version
    again = versions.publish(_server(server))
    assert again.pk == first.pk
    assert CatalogVersion.objects.filter(server=server).count() == 1
    assert _server(server).catalog_version == before
    Tool.objects.filter(pk=tool.pk).update(description="New text.")  # behind the signals: the draft only
    second = versions.publish(_server(server))
    assert second.number == 2
    assert second.entries[0]["definition"]["description"] == "New text."
    assert versions.published_entries(_server(server)) == second.entries
    assert _server(server).catalog_version == before + 1


def test_an_edit_publishes_at_once_by_default(server_factory, tool_factory, django_capture_on_commit_callbacks):
    server = server_factory()
    tool = _lookup(tool_factory, server)
    with django_capture_on_commit_callbacks(execute=True):
        tool.description = "Edited."
        tool.save()
    published = _server(server).published_version
    assert published is not None
    assert published.source == "edit"
    assert published.entries[0]["definition"]["description"] == "Edited."
    assert resolve_catalog(_server(server)).tool("lookup").description == "Edited."


def test_an_edit_waits_for_publication_when_the_server_reviews_edits(
    server_factory, tool_factory, django_capture_on_commit_callbacks
):
    server = server_factory()
    tool = _lookup(tool_factory, server)
    with django_capture_on_commit_callbacks(execute=True):
        server.review_edits = True
        server.save()
    baseline = _server(server).published_version
    assert (baseline.number, baseline.source) == (1, "initial")
    with django_capture_on_commit_callbacks(execute=True):
        tool.description = "Edited, not yet published."
        tool.save()
    assert _server(server).published_version_id == baseline.pk
    assert resolve_catalog(_server(server)).tool("lookup").description == "Look a city up."
    assert versions.draft_entries(_server(server))[0]["definition"]["description"] == "Edited, not yet published."
    published = versions.publish(_server(server))
    assert published.number == 2
    assert resolve_catalog(_server(server)).tool("lookup").description == "Edited, not yet published."


def test_rollback_republishes_an_earlier_version(server_factory, tool_factory):
    server = server_factory(review_edits=True)
    tool = _lookup(tool_factory, server)
    versions.publish(_server(server))
    Tool.objects.filter(pk=tool.pk).update(description="Second.", input_schema={"type": "object"})
    versions.publish(_server(server))
    third = versions.rollback(_server(server), 1)
    assert (third.number, third.source, third.rolled_back_to) == (3, "rollback", 1)
    served = resolve_catalog(_server(server)).tool("lookup")
    assert (served.description, dict(served.input_schema)) == ("Look a city up.", CITY)
    assert served.target.result == ANSWER  # how the call runs stays the row's
    with pytest.raises(CatalogVersion.DoesNotExist):
        versions.rollback(_server(server), 9)


def test_a_version_entry_whose_row_is_gone_is_left_out(server_factory, tool_factory):
    server = server_factory(review_edits=True)
    _lookup(tool_factory, server)
    tool_factory(server, "echo", position=1)
    versions.publish(_server(server))
    ServerTool.objects.filter(server=server, tool__name="lookup").delete()
    assert [tool.name for tool in resolve_catalog(_server(server)).tools] == ["echo"]


def test_diff_matches_by_row_then_by_name_and_lists_changed_fields():
    old = [
        _entry(_tool("lookup"), ref=1),
        _entry(_tool("gone"), ref=2),
        _entry({"name": "p", "arguments": []}, ref=7, list_name="prompts"),
    ]
    new = [
        _entry(_tool("find", annotations={"readOnlyHint": True}), ref=1),  # renamed, same row
        _entry(_tool("added"), ref=3),
        _entry({"name": "p", "arguments": []}, ref=8, list_name="prompts"),  # other row, same name, same content
    ]
    changes = [change.as_dict() for change in versions.diff(old, new)]
    assert changes == [
        {
            "list": "tools",
            "key": "find",
            "change": "changed",
            "old": _tool("lookup"),
            "new": _tool("find", annotations={"readOnlyHint": True}),
            "fields": [
                {"field": "name", "old": "lookup", "new": "find"},
                {"field": "annotations", "old": None, "new": {"readOnlyHint": True}},
            ],
        },
        {"list": "tools", "key": "added", "change": "added", "old": None, "new": _tool("added"), "fields": []},
        {"list": "tools", "key": "gone", "change": "removed", "old": _tool("gone"), "new": None, "fields": []},
    ]
    assert versions.diff(new, new) == []


def _upstream(tenant, on_change="hold"):
    return Upstream.objects.create(tenant=tenant, name="remote", url="https://up.example/mcp", on_change=on_change)


def test_auto_publish_keeps_held_upstream_changes_out_and_publish_resolves_them(
    server_factory, tool_factory, django_capture_on_commit_callbacks
):
    server = server_factory()
    tool = _lookup(tool_factory, server)
    versions.publish(_server(server))
    upstream = _upstream(server.tenant)
    change = CatalogChange.objects.create(
        tenant=server.tenant,
        server=server,
        upstream=upstream,
        list_name="tools",
        key="lookup",
        ref=tool.pk,
        change="changed",
        old=_tool(),
        new=_tool(description="Upstream says."),
    )
    Tool.objects.filter(pk=tool.pk).update(description="Upstream says.")
    with django_capture_on_commit_callbacks(execute=True):
        tool_factory(server, "echo", position=1)  # an edit of the server: published, without the held change
    published = _server(server).published_version
    assert [e["definition"].get("description") for e in published.entries] == [
        "Look a city up.",
        "Return the given text unchanged.",
    ]
    change.refresh_from_db()
    assert change.status == "pending"
    approved = versions.publish(_server(server))
    change.refresh_from_db()
    assert (change.status, change.resolved_in_id) == ("published", approved.pk)
    assert change.resolved_at is not None


def test_a_blocking_upstream_entry_with_a_pending_change_is_not_served(server_factory, tool_factory):
    server = server_factory(review_edits=True)
    tool = _lookup(tool_factory, server)
    versions.publish(_server(server))
    CatalogChange.objects.create(
        tenant=server.tenant,
        server=server,
        upstream=_upstream(server.tenant, on_change="block"),
        list_name="tools",
        key="lookup",
        ref=tool.pk,
        change="changed",
        old=_tool(),
        new=_tool(description="Changed upstream."),
    )
    McpServer.objects.bump_catalog_version({server.pk}, announce=False)
    assert resolve_catalog(_server(server)).tools == ()


@pytest.mark.django_db(transaction=True)
def test_edits_publish_once_per_transaction_and_never_after_a_rollback(server_factory, tool_factory):
    server = server_factory()
    tool = _lookup(tool_factory, server)  # committed at once: the binding published version 1
    assert CatalogVersion.objects.filter(server=server).count() == 1
    with transaction.atomic():
        for text in ("One.", "Two.", "Three."):
            tool.description = text
            tool.save()
        tool_factory(server, "echo", position=1)
    assert [v.entries[0]["definition"]["description"] for v in CatalogVersion.objects.filter(server=server)] == [
        "Three.",
        "Look a city up.",
    ]

    with pytest.raises(RuntimeError), transaction.atomic():
        tool.description = "Rolled back."
        tool.save()
        raise RuntimeError("abandon the edit")
    other = server_factory()
    tool_factory(other, "echo")  # the next commit of this thread publishes its own edits only
    assert CatalogVersion.objects.filter(server=server).count() == 2
    assert CatalogVersion.objects.filter(server=other).count() == 1
